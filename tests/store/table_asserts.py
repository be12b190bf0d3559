"""``assert_tables_equal``: two ``TurnTable``s equal field by field (arrays: same dtype and values)."""

from __future__ import annotations

import dataclasses

import numpy as np

from agentrl.types import TurnTable


def assert_tables_equal(a: TurnTable, b: TurnTable) -> None:
    """Every ``TurnTable`` field of ``a`` equals ``b``'s (arrays: dtype and values; others: ``==``)."""
    for f in dataclasses.fields(TurnTable):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(y, np.ndarray):
            assert isinstance(x, np.ndarray) and x.dtype == y.dtype, f.name
            np.testing.assert_array_equal(x, y, err_msg=f.name)
        else:
            assert x == y, (f.name, x, y)

"""TurnTable columns read from ``Turn.info`` by estimator-specific extensions (layer L0, NumPy only).

``hiper_columns``: HiPER's ``switch`` / ``has_switch`` / ``subgoal_key`` (ALGORITHMS.md §14.2), shared
by ``TurnTable.from_episodes`` and the store's columnar ``table()``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

#: ``TurnTable.subgoal_key`` of a turn without a ``<subgoal>`` tag (HiPER, ALGORITHMS.md §14.2).
NO_SUBGOAL = -1


def hiper_columns(infos: Sequence[dict]) -> dict[str, np.ndarray]:
    """HiPER's TurnTable columns from per-turn ``Turn.info`` dicts (ALGORITHMS.md §14.2).

    Args:
        infos: N dicts; the keys read are ``"switch"`` (bool: not KEEP), ``"switch_span"`` (bool:
            the response has a ``<switch>`` tag; default True) and ``"subgoal"`` (str, absent or
            None when the response has no ``<subgoal>`` tag), as the agent loop records them
            (``agentrl.rollout.parsing.parse_hiper``).
    Returns:
        ``{}`` when no dict has ``"switch"``; else ``switch``, ``has_switch`` (bool[N]) and
        ``subgoal_key`` (int64[N]: interned exact subgoal text, ``NO_SUBGOAL`` where missing).
    """
    if not any("switch" in d for d in infos):
        return {}
    text = [d.get("subgoal") for d in infos]
    vocab: dict[str, int] = {}
    key = np.array([NO_SUBGOAL if s is None else vocab.setdefault(str(s), len(vocab)) for s in text], dtype=np.int64)
    return {"switch": np.array([bool(d.get("switch", False)) for d in infos], dtype=bool),
            "has_switch": np.array([bool(d.get("switch_span", True)) for d in infos], dtype=bool),
            "subgoal_key": key}

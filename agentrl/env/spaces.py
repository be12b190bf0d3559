"""Gymnasium space for unbounded Unicode text (observations and actions of text envs)."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces


class UnicodeText(spaces.Space[str]):
    """Any Python ``str`` of length ``0 ≤ len ≤ max_length`` (default: unbounded).

    ``gymnasium.spaces.Text`` needs a fixed charset and a maximum length; text-game
    observations and LLM actions are arbitrary Unicode, so this space only checks the type
    and the length. ``sample()`` returns printable ASCII of length 1..32 (for smoke tests).

    Args:
        max_length: maximum number of characters, or None for no limit.
        seed: seed of the sampling RNG.
    """

    def __init__(self, max_length: int | None = None, seed: int | None = None) -> None:
        self.max_length = max_length
        super().__init__(shape=None, dtype=None, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and (self.max_length is None or len(x) <= self.max_length)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        n = int(self.np_random.integers(1, 33))
        codes = self.np_random.integers(32, 127, size=n)
        return "".join(map(chr, codes))

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"UnicodeText(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UnicodeText) and other.max_length == self.max_length

    def to_jsonable(self, sample_n):  # noqa: D102 - gymnasium API
        return list(sample_n)

    def from_jsonable(self, sample_n):  # noqa: D102 - gymnasium API
        return [str(s) for s in sample_n]


def text_spaces() -> tuple[UnicodeText, UnicodeText]:
    """(observation_space, action_space) for a text env."""
    return UnicodeText(), UnicodeText()


_ = np  # numpy is the RNG backend of Space

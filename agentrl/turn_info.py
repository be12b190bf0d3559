"""TurnTable columns derived from turns (layer L0, NumPy only; ``agentrl.types`` re-exports them).

``normalize_action_key`` / ``intern_strings``: the action and anchor keys (ALGORITHMS.md §8.3);
``info_columns``: the optional columns read from ``Turn.info`` (tree rollouts, BEACON's milestones,
HiPER's tags); ``hiper_columns``: HiPER's ``switch`` / ``has_switch`` / ``subgoal_key``
(ALGORITHMS.md §14.2), shared by ``TurnTable.from_episodes`` and the store's columnar ``table()``.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

#: Key that all invalid actions share in ``TurnTable.action_key`` (ALGORITHMS.md §8.3).
INVALID_ACTION_KEY = "<invalid>"

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


def normalize_action_key(action: str, valid: bool) -> str:
    """Action key of ALGORITHMS.md §8.3: lower-case, whitespace runs collapsed, stripped;
    every invalid action maps to ``INVALID_ACTION_KEY``."""
    if not valid:
        return INVALID_ACTION_KEY
    return re.sub(r"\s+", " ", action.lower()).strip()


def intern_strings(values: Sequence[str], vocab: dict[str, int] | None = None) -> np.ndarray:
    """Map strings to int64 codes with exact string equality (no normalisation).

    Args:
        values: the strings, length N.
        vocab: an existing ``{string: code}`` map to extend in place (shared across
            columns, e.g. anchor and next-anchor keys).
    Returns:
        int64[N] codes, dense from 0 in order of first appearance.
    """
    vocab = {} if vocab is None else vocab
    return np.fromiter((vocab.setdefault(v, len(vocab)) for v in values), dtype=np.int64, count=len(values))


def info_columns(infos: Sequence[dict]) -> dict[str, object]:
    """The optional TurnTable columns that turns record in ``Turn.info`` (N dicts, row order).

    Returns a dict of ``TurnTable`` keyword arguments: ``tree`` / ``branch`` (int64 lists, -1 on rows
    without the key; None when no turn records it: tree rollouts, ``agentrl.rollout.tree``),
    ``milestone`` (bool list, False where absent: BEACON, §15.2), ``n_milestones`` (int list, -1 where
    unknown; None when no turn records it) and HiPER's columns (``hiper_columns``; absent when no turn
    records ``"switch"``).
    """
    def optional(key: str) -> list[int] | None:
        return [int(d.get(key, -1)) for d in infos] if any(key in d for d in infos) else None

    return {"tree": optional("tree"), "branch": optional("branch"),
            "milestone": [bool(d.get("milestone", False)) for d in infos],
            "n_milestones": optional("n_milestones"), **hiper_columns(infos)}

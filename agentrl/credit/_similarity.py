"""Optional fuzzy anchor grouping (ALGORITHMS.md §3.6, §6.4): difflib similarity.

Inside each task group, observations are visited in a given order; each joins the
*first* existing cluster whose representative (first member) has
``difflib.SequenceMatcher(None, obs, rep).ratio() >= thresh``, otherwise it starts a new
cluster. Order dependent by design (§0.6 D4). Identical strings always land in the same
cluster, so the work is done once per distinct string (a Python loop over distinct
anchors per group: O(distinct²) ratio calls, which is why the mode is off by default).
"""

from __future__ import annotations

import difflib

import numpy as np


def visit_rank(table_episode: np.ndarray, table_t: np.ndarray) -> np.ndarray:
    """int64[N] visiting rank: rows ordered by (first row position of their episode, t)."""
    _, first = np.unique(table_episode, return_index=True)
    ep_codes = np.searchsorted(np.unique(table_episode), table_episode)
    key = first[ep_codes]
    order = np.lexsort((np.arange(table_t.size), table_t, key))
    rank = np.empty(table_t.size, dtype=np.int64)
    rank[order] = np.arange(table_t.size)
    return rank


def similarity_clusters(
    group: np.ndarray, keys: np.ndarray, rank: np.ndarray, vocab: tuple[str, ...], thresh: float
) -> np.ndarray:
    """Canonical key per row after fuzzy clustering.

    Args:
        group: int64[N] task group. keys: int64[N] codes into ``vocab``.
        rank: int64[N] visiting order (lower first). vocab: code → string.
        thresh: ratio threshold, 0 < thresh < 1.
    Returns:
        int64[N]: the vocab code of each row's cluster representative.
    Raises:
        ValueError: ``thresh`` outside (0, 1) or a key outside ``vocab``.
    """
    if not 0.0 < thresh < 1.0:
        raise ValueError(f"similarity_thresh={thresh} must lie strictly between 0 and 1")
    if keys.size and (keys.max() >= len(vocab) or keys.min() < 0):
        raise ValueError("similarity grouping needs TurnTable.anchor_vocab covering every anchor code")
    out = np.empty_like(keys)
    reps: dict[int, list[int]] = {}
    canon: dict[tuple[int, int], int] = {}
    for i in np.argsort(rank, kind="stable"):
        g, k = int(group[i]), int(keys[i])
        if (g, k) not in canon:
            text = vocab[k]
            rs = reps.setdefault(g, [])
            hit = next((r for r in rs if difflib.SequenceMatcher(None, text, vocab[r]).ratio() >= thresh), None)
            if hit is None:
                rs.append(k)
                hit = k
            canon[(g, k)] = hit
        out[i] = canon[(g, k)]
    return out

"""Optional fuzzy anchor grouping (ALGORITHMS.md §3.6, §6.4): difflib similarity.

Inside each task group, observations are visited in a given order; each joins the
*first* existing cluster whose representative (first member) has
``difflib.SequenceMatcher(None, obs, rep).ratio() >= thresh``, otherwise it starts a new
cluster. Order dependent by design (§0.6 D4). Identical strings always land in the same
cluster, so the work is done once per distinct (group, string) pair, group by group (a
group's clusters depend only on its own visit order): O(distinct²) comparisons per group.

Exact shortcuts (the clusters are exactly those of the plain loop): difflib's ratio is
``2·M / (len(a) + len(b))`` where M counts the characters of matching blocks, a common
subsequence, so ``2·LCS / (len(a) + len(b))`` bounds it from above. A pair whose bound is
below ``thresh`` cannot join; only the others run ``SequenceMatcher.ratio``. The bound comes
from rapidfuzz's bit-parallel Indel distance (``len(a) + len(b) − 2·LCS``) when rapidfuzz is
installed (the ``credit`` extra), else from difflib's own ``real_quick_ratio`` /
``quick_ratio`` bounds; each representative keeps one ``SequenceMatcher`` (its analysis of
the representative is cached as ``b``, exactly as a fresh ``SequenceMatcher(None, obs, rep)``).
"""

from __future__ import annotations

import difflib

import numpy as np

from agentrl.credit import _segments as S

try:  # optional: exact LCS bounds in C++ (agentrl[credit])
    from rapidfuzz.distance import Indel as _Indel
except ImportError:  # pragma: no cover - exercised when rapidfuzz is absent
    _Indel = None


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
    if not keys.size:
        return np.empty_like(keys)
    code, n = S.dense(group, keys)
    pos = np.empty(keys.size, dtype=np.int64)  # each row's place in the visit order
    pos[np.argsort(rank, kind="stable")] = np.arange(keys.size)
    first = np.full(n, keys.size, dtype=np.int64)
    np.minimum.at(first, code, pos)
    pair_group, pair_key = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    pair_group[code], pair_key[code] = group, keys
    rep_of = np.empty(n, dtype=np.int64)
    cur, reps, matchers = None, [], {}
    # Distinct (group, key) pairs, group by group, each group's in visit order: the plain loop's
    # decisions exactly (a group's clusters depend only on its own visit order).
    for p, g, k in _visits(first, pair_group, pair_key):
        if g != cur:
            cur, reps, matchers = g, [], {}  # per group: bounded memory
        text = vocab[k]
        hit = next((r for r in reps if _joins(text, r, vocab, matchers, thresh)), None)
        if hit is None:
            reps.append(k)
            hit = k
        rep_of[p] = hit
    return rep_of[code]


def _visits(first: np.ndarray, pair_group: np.ndarray, pair_key: np.ndarray):
    """(pair, group, key) for each distinct pair, by group then first visit."""
    order = np.lexsort((first, pair_group))
    return zip(order.tolist(), pair_group[order].tolist(), pair_key[order].tolist())


def _joins(text: str, r: int, vocab: tuple[str, ...], matchers: dict[int, difflib.SequenceMatcher],
           thresh: float) -> bool:
    """``SequenceMatcher(None, text, vocab[r]).ratio() >= thresh``, skipping the ratio when an
    upper bound already fails (``matchers[r]`` caches ``vocab[r]`` as the second sequence)."""
    rep = vocab[r]
    total = len(text) + len(rep)
    if not total:
        return 1.0 >= thresh  # difflib: two empty strings have ratio 1.0
    if _Indel is not None:
        lcs = (total - _Indel.distance(text, rep)) // 2
        if 2.0 * lcs / total < thresh:  # difflib's own formula: ratio <= this bound
            return False
    sm = matchers.get(r)
    if sm is None:
        sm = matchers[r] = difflib.SequenceMatcher(None, "", rep)
    sm.set_seq1(text)
    if _Indel is None and (sm.real_quick_ratio() < thresh or sm.quick_ratio() < thresh):
        return False
    return sm.ratio() >= thresh

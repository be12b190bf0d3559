"""RTPO — Reverse-Turn Policy Optimization, PROPOSED design (ALGORITHMS.md §9).

Paper: abstract only (no arXiv id or code checked); §9.2–9.3 is the concrete spec.

Table layout (§9.2): the base trajectory τ⁰ is one episode; each continuation sampled
at branch turn b is its own episode whose first row is its branching turn (t = b, parent
= the base's row at b−1, or -1). ``branch`` holds the branch-group id on the K sibling
branching-turn rows (the base's row b and each continuation's first row) and -1
elsewhere; branch ids are unique over the table.

Notation (§9.3): ``G_j = Σ_k γ^k rewards_j[k]``, the return-to-go of sibling j's episode
from its branching turn; ``A_j`` = GN of G over the branch group (std or mean-only,
unbiased std, singleton → 0, ties → 0). Only branching-turn rows get a value; all other
rows get 0 (trained when they are themselves a branch point). ``rtpo_update_order`` gives
the branch groups by decreasing branch turn (ties by first appearance).

Columns read: group, episode, t, branch (int64[N]); reward (float64[N]); episode_ok,
trainable (bool[N]). Statistics over eligible rows only (P5, P6).
"""

from __future__ import annotations

import numpy as np

from agentrl.credit import _segments as S
from agentrl.credit.registry import register_estimator
from agentrl.types import TurnTable


def _check_branches(table: TurnTable) -> None:
    table.require(["branch"])
    b = table.branch >= 0
    if b.any():
        pair, _ = S.dense(table.branch[b], table.group[b])
        if np.unique(pair).size != np.unique(table.branch[b]).size:
            raise ValueError("RTPO branch ids must be unique over the table (one group per branch id)")


@register_estimator("rtpo", requires=("branch",), choices={"mode": S.MODES},
                    update_order=lambda table: rtpo_update_groups(table), accepts_trees=True,
                    groups_by_task=False)  # branch groups: siblings of later rounds (newer versions) by design
def rtpo(table: TurnTable, *, gamma: float = 1.0, mode: str = "mean_std_norm", eps: float = S.EPS) -> np.ndarray:
    """RTPO branch-group advantage on branching-turn rows (§9.3).

    Args:
        table: turns with the ``branch`` column. gamma: return discount.
        mode: ``"mean_std_norm"`` or ``"mean_norm"``. eps: §0.5.
    Returns:
        float64[N]; non-zero only on eligible branching-turn rows.
    Raises:
        ValueError: missing ``branch``, bad ``mode``, a branch id in two groups,
        duplicate (episode, t).
    """
    S.check_choice("mode", mode, S.MODES)
    _check_branches(table)
    st, order = S.canonical(table)
    ret = S.discounted_returns(st, gamma, 0.0)
    m = S.eligible(st) & (st.branch >= 0)
    seg, _ = S.dense(np.where(st.branch >= 0, st.branch, -1))
    return S.uncanon(order, S.step_group_norm(ret, seg, m, mode=mode, eps=eps))


def rtpo_update_order(table: TurnTable) -> np.ndarray:
    """Branch ids in update order (§9.2 step 4): decreasing branch turn (the smallest
    ``t`` among the group's rows), ties by first appearance in the table.

    Returns:
        int64[B] branch ids.
    Raises:
        ValueError: missing ``branch`` column or a branch id in two groups.
    """
    _check_branches(table)
    rows = np.flatnonzero(table.branch >= 0)
    ids, first = np.unique(table.branch[rows], return_index=True)
    code = np.searchsorted(ids, table.branch[rows])
    turn = np.full(ids.size, np.iinfo(np.int64).max)
    np.minimum.at(turn, code, table.t[rows])
    return ids[np.lexsort((rows[first], -turn))]


def rtpo_update_groups(table: TurnTable) -> list[np.ndarray]:
    """Row indices of each branch group, in ``rtpo_update_order`` (latest branch point
    first) — the trainer's reverse-turn schedule (§9.2 step 4)."""
    order = rtpo_update_order(table)
    return [np.flatnonzero(table.branch == b) for b in order]

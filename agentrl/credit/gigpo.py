"""GiGPO — Group-in-Group Policy Optimization (ALGORITHMS.md §3).

Paper: Feng et al., "Group-in-Group Policy Optimization for LLM Agent Training",
arXiv 2505.10978. Reference: verl-agent ``gigpo/core_gigpo.py`` (commit 29e3e8b).

Notation (§3.2)::

    A_ep_i   = EPI(score, mode, "steps")_i                         (§1.1, §1.5)
    R_i      = γ-discounted step return − c_inv · invalid_i        (§1.3)
    A_step_i = GN of R over the anchor group (uid, anchor_obs), singleton → 0
    A_i      = A_ep_i + ω · A_step_i

Columns read: group, episode, t, anchor_key (int64[N]); reward (float64[N]);
action_valid, episode_ok, trainable (bool[N]); ``anchor_vocab`` only with
``enable_similarity``.

Deviations: exact-tie rule (§0.5 N4); statistics over eligible rows only (P5, P6).
"""

from __future__ import annotations

import numpy as np

from agentrl.credit import _segments as S
from agentrl.credit import breakdown as B
from agentrl.credit._similarity import similarity_clusters, visit_rank
from agentrl.credit.registry import register_estimator
from agentrl.types import TurnTable


def anchor_groups(table: TurnTable, order: np.ndarray, enable_similarity: bool, thresh: float) -> np.ndarray:
    """int64[N] step-group codes (group, anchor) of the canonical table ``table.take(order)``;
    with ``enable_similarity`` anchors are first merged by §3.6 (visit order of the
    *original* rows)."""
    keys = table.anchor_key
    if enable_similarity:
        rank = visit_rank(table.episode, table.t)
        keys = similarity_clusters(table.group, keys, rank, table.anchor_vocab, thresh)
    codes, _ = S.dense(table.group[order], keys[order])
    return codes


def _parts(table: TurnTable, gamma: float, mode: str, stats_over: str, c_inv: float, enable_similarity: bool,
           thresh: float, eps: float):
    """(st, order, elig, score, a_ep, return R, anchor-group codes, a_step), canonical order."""
    S.check_choice("mode", mode, S.MODES)
    st, order = S.canonical(table)
    elig = S.eligible(st)
    score = S.outcome_score(st, c_inv)
    a_ep = S.episode_term(st, score, elig, mode=mode, stats_over=stats_over, eps=eps)
    seg = anchor_groups(table, order, enable_similarity, thresh)
    ret = S.discounted_returns(st, gamma, c_inv)
    a_step = S.step_group_norm(ret, seg, elig, mode=mode, eps=eps)
    return st, order, elig, score, a_ep, ret, seg, a_step


def _breakdown(table: TurnTable, *, gamma: float, step_advantage_w: float, mode: str, stats_over: str, c_inv: float,
               enable_similarity: bool, similarity_thresh: float, eps: float) -> B.Breakdown:
    """GiGPO's two terms: the episode term and ω × the step term over the anchor group."""
    st, order, elig, score, a_ep, ret, seg, a_step = _parts(table, gamma, mode, stats_over, c_inv, enable_similarity,
                                                            similarity_thresh, eps)
    step = B.gn_term("step", "step term (§3.2): γ-discounted return normalised in the anchor group (task group, "
                     "anchor state); a singleton state gives 0", a_step, ret, seg, elig, elig, mode=mode,
                     keep_singleton=False, weight=step_advantage_w)
    return B.make_breakdown("gigpo", order, [B.episode_gn_term(st, score, a_ep, elig, mode=mode, stats_over=stats_over),
                                             step], {"return R": ret}, eps)


@register_estimator("gigpo", choices={"mode": S.MODES, "stats_over": S.STATS_OVER}, breakdown=_breakdown)
def gigpo(
    table: TurnTable,
    *,
    gamma: float = 0.95,
    step_advantage_w: float = 1.0,
    mode: str = "mean_std_norm",
    stats_over: str = "steps",
    c_inv: float = 0.1,
    enable_similarity: bool = False,
    similarity_thresh: float = 0.95,
    eps: float = S.EPS,
) -> np.ndarray:
    """GiGPO advantage per turn (§3.2).

    Args:
        table: turns (N rows).
        gamma: step-return discount γ.
        step_advantage_w: weight ω of the step term.
        mode: ``"mean_std_norm"`` or ``"mean_norm"``, for both terms.
        stats_over: whose scores form the episode term's statistics (§1.5): ``"steps"``
            (every step row, the reference default) or ``"trajectories"`` / ``"episodes"``
            (only the first row of each episode).
        c_inv: invalid-action penalty on the row's own score and return.
        enable_similarity / similarity_thresh: fuzzy anchor grouping (§3.6).
        eps: added to the std.
    Returns:
        float64[N]; 0 for failed-episode and non-trainable rows.
    Raises:
        ValueError: bad ``mode``, duplicate (episode, t), bad threshold.
    """
    st, order, _, _, a_ep, _, _, a_step = _parts(table, gamma, mode, stats_over, c_inv, enable_similarity,
                                                 similarity_thresh, eps)
    return S.uncanon(order, a_ep + step_advantage_w * a_step)

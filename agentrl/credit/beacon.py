"""BEACON (code name MiGPO) — milestone-guided, critic-free credit (ALGORITHMS.md §15).

Paper: "BEACON" (milestone-guided group policy optimisation), arXiv 2605.06078 (ICML 2026).
Reference: ``ZJU-REAL/BEACON`` @ db9347f, ``migpo/core_migpo.py`` (``compute_segment_rewards``,
``build_segment_groups_dynamic``).

Each episode is cut at its milestone turns k_1 < … < k_m (``milestone`` column: True on the
turn that completed the episode's next milestone; envs publish it through
``info["milestone"]``, ``agentrl.env.contract.INFO_MILESTONE``). Notation (§15.3)::

    seg_t    = j   for k_j < t ≤ k_{j+1} (j = 0..m−1, k_0 = −1)        completed segment j
             = m   for t > k_m                                          the tail (dynamic rule)
             = −1  for t > k_m when 0 < n_milestones ≤ m                ALFWorld rule: own group
    shaped_t = R_ms · γ_m^(k_{j+1} − t) in completed segment j, 0 in the tail
    step_t   = shaped_t − c_inv · invalid_t
    score_t  = EpReward − c_inv · invalid_t                              (§1.1)
    A_ep     = EPI(score, mode, stats_over)                              (§1.5, as GiGPO)
    A_seg    = GN of step over (uid, seg_t); step-level singleton → 0, tie → 0
    A_t      = A_ep + w · A_seg

Columns read: group, episode, t (int64[N]); reward (float64[N]); action_valid, episode_ok,
trainable, milestone (bool[N]); n_milestones (int64[N], optional: -1 / absent = unknown, the
dynamic WebShop rule; 0 = a task without walkthrough, whose rows all fall in segment 0).
Segments count milestones by ``t`` over every row of the episode (non-trainable rows
included, like returns); statistics use eligible rows only (P5, P6).

Deviations: exact-tie rule (§0.5 N4). A table without the ``milestone`` column is refused
(``requires``) instead of upstream's silent fall-back to GRPO; an all-False column (an env
that publishes no milestones) gives exactly that fall-back: every row is in its episode's
tail segment 0 with step reward 0 (minus penalties), so A = A_ep wherever no penalty differs.
Defaults are the released ALFWorld script's (decision D-15: γ_m 0.9, w 10, ``mean_norm``,
c_inv 0.1); the README's are γ_m 0.95, w 1.
"""

from __future__ import annotations

import numpy as np

from agentrl.credit import _segments as S
from agentrl.credit import breakdown as B
from agentrl.credit.registry import register_estimator
from agentrl.types import TurnTable


def milestone_segments(st: TurnTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Segments of a canonical table (rows sorted by (episode, t)), §15.3.

    Returns:
        (seg int64[N]: the segment index j, m for the tail, −1 for an ALFWorld tail after the
        whole walkthrough; done bool[N]: the row lies in a completed segment; dist int64[N]:
        k_{j+1} − t in a completed segment, 0 in the tail).
    """
    n = len(st)
    ms = np.asarray(st.milestone, dtype=bool)
    pos = np.flatnonzero(ms)
    # milestones strictly before each row in the whole table, minus those before its episode
    before = np.cumsum(ms) - ms
    first = S.first_of_episode(st)
    start = np.maximum.accumulate(np.where(first, np.arange(n), 0)) if n else np.zeros(0, np.int64)
    seg = (before - before[start]).astype(np.int64)
    # the next milestone row at or after each row, if it lies in the same episode
    p = np.searchsorted(pos, np.arange(n), side="left")
    nxt = pos[np.minimum(p, max(pos.size - 1, 0))] if pos.size else np.zeros(n, np.int64)
    done = (p < pos.size) & (st.episode[nxt] == st.episode) if pos.size else np.zeros(n, bool)
    dist = np.where(done, st.t[nxt] - st.t, 0).astype(np.int64)
    if st.n_milestones is not None:
        m = S.episode_sum(st, ms.astype(np.float64))  # milestones reached by the row's episode
        nm = st.n_milestones
        seg = np.where(~done & (nm > 0) & (m >= nm), -1, seg)
    return seg, done, dist


def _parts(table: TurnTable, milestone_gamma: float, milestone_reward: float, mode: str, stats_over: str,
           c_inv: float, eps: float):
    """(st, order, elig, score, a_ep, step, segment-group codes, a_seg), canonical order."""
    S.check_choice("mode", mode, S.MODES)
    table.require(("milestone",))
    st, order = S.canonical(table)
    elig = S.eligible(st)
    score = S.outcome_score(st, c_inv)
    a_ep = S.episode_term(st, score, elig, mode=mode, stats_over=stats_over, eps=eps)
    seg, done, dist = milestone_segments(st)
    shaped = np.where(done, milestone_reward * np.power(float(milestone_gamma), dist.astype(np.float64)), 0.0)
    step = shaped - c_inv * (~st.action_valid)
    codes, _ = S.dense(st.group, seg + 1)
    a_seg = S.step_group_norm(step, codes, elig, mode=mode, eps=eps)
    return st, order, elig, score, a_ep, step, codes, a_seg


def _breakdown(table: TurnTable, *, milestone_gamma: float, step_advantage_w: float, mode: str, stats_over: str,
               milestone_reward: float, c_inv: float, eps: float) -> B.Breakdown:
    """BEACON's two terms: the episode term and w × the segment term over (task group, segment)."""
    st, order, elig, score, a_ep, step, codes, a_seg = _parts(table, milestone_gamma, milestone_reward, mode,
                                                              stats_over, c_inv, eps)
    seg_term = B.gn_term("segment", "segment term (§15.3): milestone-shaped step reward R_ms·γ_m^(distance to the "
                         "segment's milestone turn), 0 after the last milestone, normalised in (task group, "
                         "segment index); a singleton gives 0", a_seg, step, codes, elig, elig, mode=mode,
                         keep_singleton=False, weight=step_advantage_w)
    return B.make_breakdown("beacon", order, [B.episode_gn_term(st, score, a_ep, elig, mode=mode,
                                                                stats_over=stats_over), seg_term],
                            {"step reward": step}, eps)


@register_estimator("beacon", requires=("milestone",), choices={"mode": S.MODES, "stats_over": S.STATS_OVER},
                    ranges={"milestone_gamma": (0.0, 1.0)}, breakdown=_breakdown)
def beacon(
    table: TurnTable,
    *,
    milestone_gamma: float = 0.9,
    step_advantage_w: float = 10.0,
    mode: str = "mean_norm",
    stats_over: str = "steps",
    milestone_reward: float = 10.0,
    c_inv: float = 0.1,
    eps: float = S.EPS,
) -> np.ndarray:
    """BEACON advantage per turn (§15.3).

    Args:
        table: turns (N rows) with the ``milestone`` bool[N] column (optional ``n_milestones``
            int64[N]).
        milestone_gamma: γ_m, discount of the shaped reward towards the segment's milestone turn
            (upstream ``algorithm.migpo.gamma``; ALFWorld script 0.9, WebShop 0.95).
        step_advantage_w: w, weight of the segment term (ALFWorld script 10, README/WebShop 1).
        mode: ``"mean_norm"`` (default) or ``"mean_std_norm"``, for both terms.
        stats_over: whose scores form the episode term's statistics (§1.5), ``"steps"`` as GiGPO.
        milestone_reward: R_ms, the shaped reward at a milestone turn (upstream hard-codes 10).
        c_inv: invalid-action penalty on the row's own score and step reward (WebShop script 1.0).
        eps: added to the std.
    Returns:
        float64[N]; 0 for failed-episode and non-trainable rows.
    Raises:
        ValueError: bad ``mode`` / ``stats_over``, no ``milestone`` column, duplicate (episode, t).
    """
    _, order, _, _, a_ep, _, _, a_seg = _parts(table, milestone_gamma, milestone_reward, mode, stats_over, c_inv, eps)
    return S.uncanon(order, a_ep + step_advantage_w * a_seg)

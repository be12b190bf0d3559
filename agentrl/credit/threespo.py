"""3SPO — State-Score-Supervised Policy Optimization (ALGORITHMS.md §16, PROPOSED integration).

Paper: "3SPO", arXiv 2606.09961. Reference: ``genalyu/3SPO`` @ da38445 (``gigpo/core_3spo.py``:
``StateScoreManager``, ``compute_3spo_step_reward``, ``compute_3spo_advantage`` = GiGPO's
``step_norm_reward``). The released scripts never call these pieces (§16.0); the batch form
below is the spec's PROPOSED design (decision D-16).

Notation (§16.3), per row with prior statistics (N, N_s) of a state, N_f = N − N_s, counter t::

    S(s)  = 1                                      if N = 0 (unseen)
          = 0                                      if not (N_f < ξ or N_s/(N + ε) > ζ)  (hopeless)
          = exp(−α · ln(t) · N_s/(N + ε))          otherwise
    w_t   = 0.5 · exp(−ω_k · N(s_t))
    nov_t = 1 if anchor(s_t) ≠ anchor(s_{t+1}) else 0
    R_t   = w_t · nov_t + (0.5 − w_t) · (S(s_t) − S(s_{t+1})) + 0.5 · reward_t − c_inv · invalid_t
    A_t   = GN of R over (group, anchor(s_t)) (step-level singleton → 0, tie → 0)
            + episode_advantage_w · EPI(score, mode, "steps")

State outside the batch: the statistics (N, N_s) of every row's anchor and next anchor and the
counter t come from the run's *earlier* iterations (the ``state_stats`` column, int64[N, 5],
``agentrl.types.STATE_STATS_FIELDS``), which the trainer fills from the run's store before the
estimator runs (``agentrl.store.with_state_stats``); the estimator itself stays pure and never
updates them (the batch's own episodes count from the next iteration on: a snapshot, §16.5).
States are keyed globally (across task groups) by exact anchor text, as upstream.

Columns read: group, episode, t, anchor_key, next_anchor_key (int64[N]); reward (float64[N]);
action_valid, episode_ok, trainable (bool[N]); state_stats (int64[N, 5]).

Not implemented: the adaptive branching of §16.6 (a rollout policy, not credit).
Deviations: exact-tie rule (§0.5 N4); statistics over eligible rows only (P5, P6); counts are a
snapshot before the batch (upstream updates them sequentially per DFS episode, §16.5).
"""

from __future__ import annotations

import numpy as np

from agentrl.credit import _segments as S
from agentrl.credit import breakdown as B
from agentrl.credit.registry import register_estimator
from agentrl.types import TurnTable

#: (low, high) of 3SPO's own hyperparameters (``register_estimator(ranges=...)``).
RANGES = {"alpha": (0.0, None), "xi": (0.0, None), "zeta": (0.0, None), "omega_k": (0.0, None)}


def check_state_stats(stats: np.ndarray) -> None:
    """Raise ValueError unless ``stats`` (int64[N, 5], ``STATE_STATS_FIELDS``) is consistent:
    counts ≥ 0, successes ≤ visits, visits ≤ t − 1 (each earlier episode counts a state once)."""
    n, s, nn, ns, t = stats.T
    bad = (n < 0) | (s < 0) | (s > n) | (nn < 0) | (ns < 0) | (ns > nn) | (n > t - 1) | (nn > t - 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"TurnTable.state_stats row {i} = {stats[i].tolist()} is inconsistent: need 0 <= n_success "
                         "<= n_total <= t - 1 for the anchor and the next anchor (t = 1 + earlier ok episodes)")


def state_score(n_total: np.ndarray, n_success: np.ndarray, t: np.ndarray, *, alpha: float, xi: float,
                zeta: float, eps: float) -> np.ndarray:
    """S(s) of §16.3 per row: float64[N] from prior visits / successes (int64[N]) and t (int64[N] ≥ 1)."""
    n = n_total.astype(np.float64)
    rate = n_success / (n + eps)
    promising = ((n - n_success) < xi) | (rate > zeta)
    score = np.exp(-alpha * np.log(np.maximum(t, 1).astype(np.float64)) * rate)
    return np.where(n_total == 0, 1.0, np.where(promising, score, 0.0))


def _parts(table: TurnTable, alpha: float, xi: float, zeta: float, omega_k: float, mode: str, c_inv: float,
           eps: float):
    """(st, order, elig, step reward R, S(s_t), S(s_t+1), w, anchor-group codes, A_step), canonical order."""
    S.check_choice("mode", mode, S.MODES)
    table.require(("state_stats",))
    check_state_stats(table.state_stats)
    st, order = S.canonical(table)
    elig = S.eligible(st)
    n, ns, nn, nns, t = st.state_stats.T
    s_now = state_score(n, ns, t, alpha=alpha, xi=xi, zeta=zeta, eps=eps)
    s_next = state_score(nn, nns, t, alpha=alpha, xi=xi, zeta=zeta, eps=eps)
    w = 0.5 * np.exp(-omega_k * n.astype(np.float64))
    nov = (st.anchor_key != st.next_anchor_key).astype(np.float64)
    reward = w * nov + (0.5 - w) * (s_now - s_next) + 0.5 * st.reward - c_inv * (~st.action_valid)
    seg, _ = S.dense(st.group, st.anchor_key)
    a_step = S.step_group_norm(reward, seg, elig, mode=mode, eps=eps)
    return st, order, elig, reward, s_now, s_next, w, seg, a_step


def _breakdown(table: TurnTable, *, alpha: float, xi: float, zeta: float, omega_k: float, mode: str, c_inv: float,
               episode_advantage_w: float, eps: float) -> B.Breakdown:
    """3SPO's terms: the step term over (task group, anchor) and, when weighted, the episode term."""
    st, order, elig, reward, s_now, s_next, w, seg, a_step = _parts(table, alpha, xi, zeta, omega_k, mode, c_inv, eps)
    terms = [B.gn_term("step", "step term (§16.3): dense step reward R (novelty, state-score decrease, success) "
                       "normalised in the anchor group (task group, anchor state); a singleton state gives 0",
                       a_step, reward, seg, elig, elig, mode=mode, keep_singleton=False)]
    if episode_advantage_w != 0.0:
        score = S.outcome_score(st, c_inv)
        a_ep = S.episode_term(st, score, elig, mode=mode, stats_over="steps", eps=eps)
        terms.append(B.episode_gn_term(st, score, a_ep, elig, mode=mode, stats_over="steps",
                                       weight=episode_advantage_w))
    return B.make_breakdown("threespo", order, terms, {"step reward R": reward, "S(s_t)": s_now,
                                                       "S(s_t+1)": s_next, "w_t": w}, eps)


@register_estimator("threespo", requires=("state_stats",), choices={"mode": S.MODES}, ranges=RANGES,
                    breakdown=_breakdown, store_query="state_stats")
def threespo(
    table: TurnTable,
    *,
    alpha: float = 50.0,
    xi: float = 10.0,
    zeta: float = 0.1,
    omega_k: float = 0.1,
    mode: str = "mean_norm",
    c_inv: float = 0.1,
    episode_advantage_w: float = 0.0,
    eps: float = S.EPS,
) -> np.ndarray:
    """3SPO advantage per turn (§16.3, PROPOSED batch form).

    Args:
        table: turns (N rows) with the ``state_stats`` column (int64[N, 5]: prior (N, N_s) of
            the anchor and of the next anchor, and t; ``agentrl.store.with_state_stats``).
        alpha: α, sharpness of the state score (the scripts' 50; the class default is 1).
        xi: ξ, a state with N_f ≥ ξ failures and success rate ≤ ζ is hopeless (S = 0).
        zeta: ζ, success-rate threshold of the hopeless test.
        omega_k: ω_k, decay of the novelty weight w = 0.5·exp(−ω_k·N(s_t)).
        mode: ``"mean_norm"`` (upstream ``remove_std=True``) or ``"mean_std_norm"``, for both terms.
        c_inv: invalid-action penalty on the row's own step reward (and score).
        episode_advantage_w: weight of an added episode term EPI (§1.5, "steps"); 0 = upstream.
        eps: ε of the success rate and of the std normaliser.
    Returns:
        float64[N]; 0 for failed-episode and non-trainable rows and for singleton anchor groups.
    Raises:
        ValueError: bad ``mode``, missing or inconsistent ``state_stats``, duplicate (episode, t).
    """
    st, order, elig, _, _, _, _, _, a_step = _parts(table, alpha, xi, zeta, omega_k, mode, c_inv, eps)
    if episode_advantage_w != 0.0:
        a_ep = S.episode_term(st, S.outcome_score(st, c_inv), elig, mode=mode, stats_over="steps", eps=eps)
        a_step = a_step + episode_advantage_w * a_ep
    return S.uncanon(order, a_step)

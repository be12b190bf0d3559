"""HGPO — Hierarchy-of-Groups Policy Optimization (ALGORITHMS.md §4).

Paper: arXiv 2602.22817 (ICLR 2026). Reference: verl-agent ``recipe/hgpo/core_hgpo.py``
(PR #232, b4918cc).

Notation (§4.3): ``R_i`` = γ-discounted step return minus the row's own invalid penalty.
For step i at turn t and k = 1..min(K+1, t+1), the history key is
``key_k(i) = (k, (o_{t−k+1}, …, o_t))`` inside the task group (anchor observations only,
never crossing episodes). Every group with ≥ 2 members gives the item
``a_{k,i} = (R_i − mean)/(popstd + eps)`` (``mean_std_norm``, *population* std) or
``R_i − mean`` (``mean_norm``); tied groups give 0. With ``base_group`` the item
``(0, A_ep_i)`` (GiGPO's episode term) is added. Items with ``|a| <= 1e-9`` are dropped
(N6); ``A_i = Σ w_k a_k / (Σ w_k + eps)`` with ``w_k = (k + 1)^α``; 0 if nothing is kept.

Columns read: group, episode, t, anchor_key (int64[N]); reward (float64[N]);
action_valid, episode_ok, trainable (bool[N]).

History keys are built without string joins: ``key_k(i) = intern(key_{k−1}(prev(i)),
anchor(i))``, one vectorised ``np.unique`` per k. Deviations: exact-tie rule (N4/N6);
statistics over eligible rows only (P5, P6).
"""

from __future__ import annotations

import numpy as np

from agentrl.credit import _segments as S
from agentrl.credit.registry import register_estimator
from agentrl.types import TurnTable

ZERO_ITEM = 1e-9


def history_keys(st: TurnTable, k_max: int) -> list[np.ndarray]:
    """History-window keys of a canonical table, ``[key_1, …, key_{k_max}]``.

    Returns:
        list of int64[N]; ``key_k[i]`` is a code for (group, last k anchors of row i's
        episode ending at i), or -1 when the episode has fewer than k turns up to i.
    """
    n = len(st)
    prev = np.full(n, -1, dtype=np.int64)
    if n > 1:
        same = st.episode[1:] == st.episode[:-1]
        prev[1:][same] = np.arange(n - 1)[same]
    keys = [S.dense(st.group, st.anchor_key)[0]]
    for _ in range(1, k_max):
        last = keys[-1]
        ok = (prev >= 0) & (last[np.maximum(prev, 0)] >= 0)
        key = np.full(n, -1, dtype=np.int64)
        if ok.any():
            key[ok] = S.dense(last[prev[ok]], st.anchor_key[ok])[0]
        keys.append(key)
    return keys


@register_estimator("hgpo", choices={"mode": S.MODES, "stats_over": S.STATS_OVER})
def hgpo(
    table: TurnTable,
    *,
    history_length: int = 2,
    length_weight_alpha: float = 1.0,
    mode: str = "mean_std_norm",
    base_group: bool = False,
    stats_over: str = "steps",
    gamma: float = 0.95,
    c_inv: float = 0.1,
    eps: float = S.EPS,
) -> np.ndarray:
    """HGPO advantage per turn (§4.3).

    Args:
        table: turns (N rows).
        history_length: K; windows k = 1..K+1 (K ≥ 0).
        length_weight_alpha: α in ``w_k = (k+1)^α`` (0 = uniform).
        mode: ``"mean_std_norm"`` (population std) or ``"mean_norm"``.
        base_group: add GiGPO's episode term as item k = 0 (weight 1).
        stats_over: whose scores form the episode term's statistics (§1.5): ``"steps"``
            (every step row, the reference default) or ``"trajectories"`` / ``"episodes"``
            (only the first row of each episode).
        gamma: step-return discount. c_inv: invalid penalty. eps: §0.5.
    Returns:
        float64[N]; 0 for failed-episode and non-trainable rows.
    Raises:
        ValueError: bad ``mode``, negative ``history_length``, duplicate (episode, t).
    """
    S.check_choice("mode", mode, S.MODES)
    if history_length < 0:
        raise ValueError(f"history_length={history_length} must be >= 0")
    st, order = S.canonical(table)
    elig = S.eligible(st)
    ret = S.discounted_returns(st, gamma, c_inv)
    num = np.zeros(len(st))
    den = np.zeros(len(st))

    def add(a: np.ndarray, k: int) -> None:
        keep = np.abs(a) > ZERO_ITEM
        w = (k + 1.0) ** length_weight_alpha
        num[keep] += w * a[keep]
        den[keep] += w

    if base_group:
        add(S.episode_term(st, S.outcome_score(st, c_inv), elig, mode=mode, stats_over=stats_over, eps=eps), 0)
    for k, key in enumerate(history_keys(st, history_length + 1), start=1):
        m = elig & (key >= 0)
        add(S.group_norm(ret, np.maximum(key, 0), m, m, mode=mode, keep_singleton=False, ddof=0, eps=eps), k)
    adv = np.where(den > 0, num / (den + eps), 0.0)
    return S.uncanon(order, adv)

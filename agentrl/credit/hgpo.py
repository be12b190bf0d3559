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
from agentrl.credit import breakdown as B
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


def _items(table: TurnTable, history_length: int, mode: str, base_group: bool, stats_over: str, gamma: float,
           c_inv: float, eps: float):
    """(st, order, elig, ret, items): ``items`` lists ``(k, a_k, key_k, contrib_k)`` in the
    order the estimator adds them (k = 0: the episode term, its key the task group), canonical order."""
    S.check_choice("mode", mode, S.MODES)
    if history_length < 0:
        raise ValueError(f"history_length={history_length} must be >= 0")
    st, order = S.canonical(table)
    elig = S.eligible(st)
    ret = S.discounted_returns(st, gamma, c_inv)
    items = []
    if base_group:
        items.append((0, S.episode_term(st, S.outcome_score(st, c_inv), elig, mode=mode, stats_over=stats_over, eps=eps),
                      None, None))
    for k, key in enumerate(history_keys(st, history_length + 1), start=1):
        m = elig & (key >= 0)
        items.append((k, S.group_norm(ret, np.maximum(key, 0), m, m, mode=mode, keep_singleton=False, ddof=0, eps=eps),
                      key, m))
    return st, order, elig, ret, items


def _weights(items: list, alpha: float, n: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Per item the float64[N] weight ``w_k`` where the item is kept (|a| > 1e-9), else 0, and their sum."""
    ws = [np.where(np.abs(a) > ZERO_ITEM, (k + 1.0) ** alpha, 0.0) for k, a, _, _ in items]
    den = np.zeros(n)
    for w in ws:
        den += w
    return ws, den


def _breakdown(table: TurnTable, *, history_length: int, length_weight_alpha: float, mode: str, base_group: bool,
               stats_over: str, gamma: float, c_inv: float, eps: float) -> B.Breakdown:
    """One term per history window k (and the episode term as k = 0 with ``base_group``);
    weight ``w_k / (Σ kept w + eps)``, 0 for a dropped item (|a| <= 1e-9)."""
    st, order, elig, ret, items = _items(table, history_length, mode, base_group, stats_over, gamma, c_inv, eps)
    ws, den = _weights(items, length_weight_alpha, len(st))
    terms = []
    for (k, a, key, m), w in zip(items, ws):
        weight = np.where(den > 0, w / (den + eps), 0.0)
        if key is None:
            term = B.episode_gn_term(st, S.outcome_score(st, c_inv), a, elig, mode=mode, stats_over=stats_over,
                                     weight=weight)
        else:
            term = B.gn_term(f"history k={k}", f"history window of the last {k} anchor state(s) (§4.3): return "
                             "normalised among the group's turns with the same window (population std)", a, ret,
                             np.maximum(key, 0), m, m, mode=mode, keep_singleton=False, ddof=0, weight=weight)
            term = B.Term(term.name, term.doc, term.value, term.weight, term.x, np.where(key >= 0, term.group, -1),
                          np.where(key >= 0, term.size, 0), term.mean, term.std, term.formula)
        terms.append(term)
    return B.make_breakdown("hgpo", order, terms, {"return R": ret}, eps)


@register_estimator("hgpo", choices={"mode": S.MODES, "stats_over": S.STATS_OVER}, breakdown=_breakdown)
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
    st, order, _, _, items = _items(table, history_length, mode, base_group, stats_over, gamma, c_inv, eps)
    ws, den = _weights(items, length_weight_alpha, len(st))
    num = np.zeros(len(st))
    for (_, a, _, _), w in zip(items, ws):
        num += w * a
    adv = np.where(den > 0, num / (den + eps), 0.0)
    return S.uncanon(order, adv)

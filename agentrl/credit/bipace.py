"""BiPACE (BiGPO clustering + PACE_Q), PROPOSED instance (ALGORITHMS.md §8).

Paper: arXiv 2606.25556 (abstract only; authors' code TianxiangZhao/BiPACE not checked).
§8.3 is the concrete spec implemented here.

Notation (§8.3), inside each task group:

* BiGPO clusters: connected components (single linkage) of the graph with an edge i–j
  when ``1 − h_i·h_j/(|h_i||h_j|) <= tau`` or, with ``merge_identical_anchor``, when the
  anchors are equal. A zero hidden vector has no cosine edge.
* ``G_i`` = GiGPO step return (γ, own invalid penalty, §1.3).
* PACE_Q in a cluster C with |C| ≥ 2: ``V(C)`` = mean G, ``Q(C, a)`` = mean G of the
  members with action key a, ``A_step_i = (Q(C, a_i) − V(C))/(std_C(G) + eps)``
  (``mean_std_norm``, unbiased std) or ``Q − V`` (``mean_norm``); singleton cluster,
  all-equal G or a single action key → 0.
* ``A = EPI(score, mode, "steps") + ω · A_step``.

Columns read: group, episode, t, anchor_key, action_key (int64[N]; action keys already
normalised by ``agentrl.types.normalize_action_key``); reward (float64[N]); hidden
(float64[N, H]); action_valid, episode_ok, trainable (bool[N]).

Cost: the cosine links are screened (``_cosine.screened_edges``: a head-columns bound, then an
exact float64 recompute of the surviving pairs; the same components as the full
(n_g × H)·(H × n_g) block per group, ``cosine_edges``), components by vectorised min-label
propagation with pointer jumping. Clusters and statistics use
eligible rows only (P5, P6).
"""

from __future__ import annotations

import numpy as np

from agentrl.credit import _segments as S
from agentrl.credit import breakdown as B
from agentrl.credit._cosine import screened_edges
from agentrl.credit.registry import register_estimator
from agentrl.types import TurnTable


def connected_components(n: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """int64[n] component label per node (the smallest node index in its component)."""
    label = np.arange(n)
    while True:
        m = np.minimum(label[u], label[v])
        new = label.copy()
        np.minimum.at(new, u, m)
        np.minimum.at(new, v, m)
        while True:
            jumped = new[new]
            if np.array_equal(jumped, new):
                break
            new = jumped
        if np.array_equal(new, label):
            return label
        label = new


def bigpo_clusters(
    st: TurnTable, hidden: np.ndarray, src: np.ndarray, elig: np.ndarray, tau: float, merge_identical_anchor: bool
) -> np.ndarray:
    """int64[N] cluster label per row of the canonical table ``st`` (row i's hidden state is
    ``hidden[src[i]]``); only eligible rows are linked, the others stay alone."""
    rows = np.flatnonzero(elig)
    u, v = screened_edges(hidden, src, st.group, rows, tau, st.anchor_key if merge_identical_anchor else None)
    if merge_identical_anchor and rows.size:
        key, nk = S.dense(st.group[rows], st.anchor_key[rows])
        rep = np.full(nk, -1, dtype=np.int64)
        rep[key[::-1]] = rows[::-1]
        u, v = np.concatenate([u, rows]), np.concatenate([v, rep[key]])
    return connected_components(len(st), u, v)


def pace_parts(ret: np.ndarray, cluster: np.ndarray, action: np.ndarray, elig: np.ndarray, *, mode: str,
               eps: float) -> dict:
    """PACE_Q (§8.3) and what it is made of, per row (float64[N] unless said): ``value`` (the
    step advantage, 0 outside ``elig``), ``q`` = Q(C, a_i), ``size`` (int64, eligible members
    of the row's cluster), ``mean`` = V(C), ``std`` = std_C(G), ``n_actions`` (int64, distinct
    action keys in the cluster), ``ok`` (bool: the cluster gives a comparison), ``cluster`` (int64 code)."""
    c, _ = S.dense(cluster)
    cnt, mean, std, tie = S.segment_stats(ret, c, elig)
    ca, n_ca = S.dense(cluster, action)
    q = np.bincount(ca[elig], weights=ret[elig], minlength=n_ca) / np.maximum(np.bincount(ca[elig], minlength=n_ca), 1)
    pair_c = np.zeros(n_ca, dtype=np.int64)
    pair_c[ca[elig]] = c[elig]
    used = np.zeros(n_ca, dtype=bool)
    used[ca[elig]] = True
    n_act = np.bincount(pair_c[used], minlength=cnt.size)
    ok = (cnt >= 2) & ~tie & (n_act >= 2)
    x = q[ca] - mean[c]
    if mode == "mean_std_norm":
        x = x / (std[c] + eps)
    return dict(value=np.where(elig & ok[c], x, 0.0), q=q[ca], size=cnt[c], mean=mean[c], std=std[c],
                n_actions=n_act[c], ok=elig & ok[c], cluster=c)


def pace_q(ret: np.ndarray, cluster: np.ndarray, action: np.ndarray, elig: np.ndarray, *, mode: str, eps: float) -> np.ndarray:
    """PACE_Q step advantage (§8.3), float64[N]; 0 outside ``elig``."""
    return pace_parts(ret, cluster, action, elig, mode=mode, eps=eps)["value"]


def _parts(table: TurnTable, gamma: float, tau: float, merge_identical_anchor: bool, mode: str, stats_over: str,
           c_inv: float, eps: float) -> dict:
    """st, order, elig, ret, pace (``pace_parts``), score, a_ep — canonical order."""
    S.check_choice("mode", mode, S.MODES)
    table.require(["hidden"])
    st, order = S.canonical(table)
    elig = S.eligible(st)
    cluster = bigpo_clusters(st, table.hidden, order, elig, tau, merge_identical_anchor)
    ret = S.discounted_returns(st, gamma, c_inv)
    score = S.outcome_score(st, c_inv)
    return dict(st=st, order=order, elig=elig, ret=ret, score=score,
                pace=pace_parts(ret, cluster, st.action_key, elig, mode=mode, eps=eps),
                a_ep=S.episode_term(st, score, elig, mode=mode, stats_over=stats_over, eps=eps))


def _breakdown(table: TurnTable, *, gamma: float, tau: float, merge_identical_anchor: bool, step_advantage_w: float,
               mode: str, stats_over: str, c_inv: float, eps: float) -> B.Breakdown:
    """BiPACE's terms: the episode term and ω × PACE_Q over the row's BiGPO cluster (x = Q(C, a))."""
    p = _parts(table, gamma, tau, merge_identical_anchor, mode, stats_over, c_inv, eps)
    pc, elig = p["pace"], p["elig"]
    nan = np.full(elig.size, np.nan)
    step = B.Term("step", "PACE_Q step term (§8.3): Q(cluster, action) − V(cluster) over the row's BiGPO cluster "
                  "(cosine-linked hidden states); a singleton cluster, tied returns or one action give 0",
                  pc["value"], np.full(elig.size, float(step_advantage_w)), pc["q"],
                  np.where(elig, pc["cluster"], -1), np.where(elig, pc["size"], 0), np.where(pc["ok"], pc["mean"], nan),
                  np.where(pc["ok"], pc["std"], nan), B.FORMULAS[mode])
    ep = B.episode_gn_term(p["st"], p["score"], p["a_ep"], elig, mode=mode, stats_over=stats_over)
    return B.make_breakdown("bipace", p["order"], [ep, step], {"return G": p["ret"],
                                                               "actions in cluster": pc["n_actions"]}, eps)


@register_estimator("bipace", requires=("hidden",), choices={"mode": S.MODES, "stats_over": S.STATS_OVER},
                    breakdown=_breakdown)
def bipace(
    table: TurnTable,
    *,
    gamma: float = 0.95,
    tau: float = 0.05,
    merge_identical_anchor: bool = True,
    step_advantage_w: float = 1.0,
    mode: str = "mean_std_norm",
    stats_over: str = "steps",
    c_inv: float = 0.1,
    eps: float = S.EPS,
) -> np.ndarray:
    """BiPACE_Q advantage per turn (§8.3, PROPOSED).

    Args:
        table: turns with ``hidden`` (N, H).
        gamma: step-return discount. tau: cosine-distance threshold τ.
        merge_identical_anchor: also link rows with equal anchors.
        step_advantage_w: ω. mode: ``"mean_std_norm"`` / ``"mean_norm"``.
        stats_over: whose scores form the episode term's statistics (§1.5): ``"steps"``
            (every step row, the reference default) or ``"trajectories"`` / ``"episodes"``
            (only the first row of each episode).
        c_inv: invalid penalty (score and return). eps: §0.5.
    Returns:
        float64[N]; 0 for failed-episode and non-trainable rows.
    Raises:
        ValueError: missing ``hidden``, bad ``mode``, duplicate (episode, t).
    """
    p = _parts(table, gamma, tau, merge_identical_anchor, mode, stats_over, c_inv, eps)
    return S.uncanon(p["order"], p["a_ep"] + step_advantage_w * p["pace"]["value"])

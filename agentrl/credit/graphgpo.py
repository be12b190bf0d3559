"""GraphGPO — graph distance-to-goal advantage (ALGORITHMS.md §6).

Paper: arXiv 2605.26684. Reference: verl-agent ``recipe/GraphGPO/core_graph.py``
(PR #256, 234a913).

Notation (§6.3), inside each task group: the last turn of every episode with
``EpReward > 0`` has its next state relabelled to the goal node ``"success"``; the
graph has one edge ``anchor → next`` per turn; ``d(x)`` = fewest hops from x to the goal
(``d = D_max + 1`` where the goal is unreachable, D_max = the group's largest finite
distance). Step return ``G_i = goal_value · γ^d(next_i)`` (or
``goal_value · γ^(d(next_i) − d(anchor_i) + 1)`` with ``normalize_distance``), minus
``c_inv · invalid_i``; ``A_step`` = GN over (group, anchor) as GiGPO's step term;
``A = w_step · A_step + w_ep · EPI(score, mode, "steps")``.

Columns read: group, episode, t, anchor_key, next_anchor_key (int64[N], one vocabulary);
reward (float64[N]); action_valid, episode_ok, trainable (bool[N]); ``anchor_vocab``
(to find an observation literally equal to ``"success"``, which is the goal node, §6.5,
and for ``enable_similarity``).

Distances come from one multi-source BFS over all groups at once on the reversed graph
(CSR arrays, one vectorised step per BFS level). Deviations: exact-tie rule (N4); the
graph and all statistics use eligible rows only (P5, P6).
"""

from __future__ import annotations

import numpy as np

from agentrl.credit import _segments as S
from agentrl.credit import breakdown as B
from agentrl.credit._similarity import similarity_clusters, visit_rank
from agentrl.credit.registry import register_estimator
from agentrl.types import TurnTable

GOAL = "success"


def bfs_to_goal(src: np.ndarray, dst: np.ndarray, goals: np.ndarray, n_nodes: int) -> np.ndarray:
    """Hop distance from every node to the nearest goal along edge direction.

    Args:
        src, dst: int64[E] edges src → dst. goals: int64[G] goal nodes. n_nodes: node count.
    Returns:
        float64[n_nodes], ``inf`` where no goal is reachable.
    """
    dist = np.full(n_nodes, np.inf)
    order = np.argsort(dst, kind="stable")
    src_by_dst = src[order]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n_nodes))])
    frontier = np.unique(goals)
    dist[frontier] = 0.0
    level = 0
    while frontier.size:
        starts, counts = indptr[frontier], indptr[frontier + 1] - indptr[frontier]
        idx = np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
        cand = np.unique(src_by_dst[idx])
        frontier = cand[np.isinf(dist[cand])]
        level += 1
        dist[frontier] = level
    return dist


def goal_distances(
    group: np.ndarray, anchor: np.ndarray, nxt: np.ndarray, elig: np.ndarray, goal: int
) -> tuple[np.ndarray, np.ndarray]:
    """(d(anchor_i), d(next_i)) per row, float64[N] each (§6.3 steps 2–3).

    The graph of each group has one edge anchor → next per eligible row; nodes that cannot
    reach the goal get ``D_max + 1`` with D_max the group's largest finite distance.
    """
    n = group.size
    g2 = np.concatenate([group, group])
    keys = np.concatenate([anchor, nxt])
    node, n_nodes = S.dense(g2, keys)
    na, nn = node[:n], node[n:]
    is_goal = np.concatenate([elig, elig]) & (keys == goal)
    dist = bfs_to_goal(na[elig], nn[elig], node[is_goal], n_nodes)
    node_group = np.zeros(n_nodes, dtype=np.int64)
    node_group[node] = S.dense(g2)[0]
    finite = np.isfinite(dist)
    d_max = np.zeros(int(node_group.max(initial=0)) + 1)
    np.maximum.at(d_max, node_group[finite], dist[finite])
    dist = np.where(finite, dist, d_max[node_group] + 1.0)
    return dist[na], dist[nn]


def _keys(table: TurnTable, order: np.ndarray, enable_similarity: bool, thresh: float) -> tuple[np.ndarray, np.ndarray]:
    a, nx = table.anchor_key, table.next_anchor_key
    if enable_similarity:
        rank = visit_rank(table.episode, table.t)
        both = similarity_clusters(np.concatenate([table.group, table.group]), np.concatenate([a, nx]),
                                   np.concatenate([2 * rank, 2 * rank + 1]), table.anchor_vocab, thresh)
        a, nx = both[: a.size], both[a.size:]
    return a[order], nx[order]


def _parts(table: TurnTable, gamma: float, mode: str, stats_over: str, normalize_distance: bool,
           enable_similarity: bool, thresh: float, goal_value: float, c_inv: float, eps: float, episode: bool) -> dict:
    """The arrays of §6.3 in canonical order: st, order, elig, d_anchor, d_next, ret, seg, a_step,
    and (with ``episode``) score, a_ep."""
    S.check_choice("mode", mode, S.MODES)
    st, order = S.canonical(table)
    elig = S.eligible(st)
    anchor, nxt = _keys(table, order, enable_similarity, thresh)
    vocab = table.anchor_vocab
    top = max(int(anchor.max(initial=-1)), int(nxt.max(initial=-1)), len(vocab) - 1)
    goal = vocab.index(GOAL) if GOAL in vocab else top + 1
    ep_ret = S.episode_sum(st, st.reward)
    nxt = np.where((S.next_row(st) < 0) & (ep_ret > 0), goal, nxt)
    d_anchor, d_next = goal_distances(st.group, anchor, nxt, elig, goal)
    expo = d_next - d_anchor + 1.0 if normalize_distance else d_next
    ret = goal_value * gamma**expo - c_inv * (~st.action_valid)
    seg, _ = S.dense(st.group, anchor)
    out = dict(st=st, order=order, elig=elig, d_anchor=d_anchor, d_next=d_next, ret=ret, seg=seg,
               a_step=S.step_group_norm(ret, seg, elig, mode=mode, eps=eps))
    if episode:
        out["score"] = S.outcome_score(st, c_inv)
        out["a_ep"] = S.episode_term(st, out["score"], elig, mode=mode, stats_over=stats_over, eps=eps)
    return out


def _breakdown(table: TurnTable, *, gamma: float, step_advantage_w: float, episode_advantage_w: float, mode: str,
               stats_over: str, normalize_distance: bool, enable_similarity: bool, similarity_thresh: float,
               goal_value: float, c_inv: float, eps: float) -> B.Breakdown:
    """GraphGPO's terms: w_step × the step term over the anchor group, then w_ep × the episode term."""
    p = _parts(table, gamma, mode, stats_over, normalize_distance, enable_similarity, similarity_thresh, goal_value,
               c_inv, eps, episode_advantage_w != 0)
    st, elig = p["st"], p["elig"]
    terms = [B.gn_term("step", "step term (§6.3): goal_value·γ^d(next) − c_inv·invalid, normalised in the anchor "
                       "group (task group, anchor state); a singleton state gives 0", p["a_step"], p["ret"], p["seg"],
                       elig, elig, mode=mode, keep_singleton=False, weight=step_advantage_w)]
    if episode_advantage_w != 0:
        terms.append(B.episode_gn_term(st, p["score"], p["a_ep"], elig, mode=mode, stats_over=stats_over,
                                       weight=episode_advantage_w))
    return B.make_breakdown("graphgpo", p["order"], terms, {"d(anchor)": p["d_anchor"], "d(next)": p["d_next"]}, eps)


@register_estimator("graphgpo", choices={"mode": S.MODES, "stats_over": S.STATS_OVER}, breakdown=_breakdown)
def graphgpo(
    table: TurnTable,
    *,
    gamma: float = 0.1,
    step_advantage_w: float = 1.0,
    episode_advantage_w: float = 1.0,
    mode: str = "mean_std_norm",
    stats_over: str = "steps",
    normalize_distance: bool = False,
    enable_similarity: bool = False,
    similarity_thresh: float = 0.95,
    goal_value: float = 10.0,
    c_inv: float = 0.1,
    eps: float = S.EPS,
) -> np.ndarray:
    """GraphGPO advantage per turn (§6.3).

    Args:
        table: turns (N rows).
        gamma: graph decay γ (0.10 ALFWorld, 0.20 WebShop scripts).
        step_advantage_w / episode_advantage_w: weights of the two terms.
        mode: ``"mean_std_norm"`` or ``"mean_norm"``.
        stats_over: whose scores form the episode term's statistics (§1.5): ``"steps"``
            (every step row, the reference default) or ``"trajectories"`` / ``"episodes"``
            (only the first row of each episode).
        normalize_distance: use ``d(next) − d(anchor) + 1`` as the exponent.
        enable_similarity / similarity_thresh: fuzzy node canonicalisation (§6.4).
        goal_value: the constant 10 of §6.3 step 4. c_inv: invalid penalty. eps: §0.5.
    Returns:
        float64[N]; 0 for failed-episode and non-trainable rows.
    Raises:
        ValueError: bad ``mode``, duplicate (episode, t), bad threshold.
    """
    p = _parts(table, gamma, mode, stats_over, normalize_distance, enable_similarity, similarity_thresh, goal_value,
               c_inv, eps, episode_advantage_w != 0)
    adv = step_advantage_w * p["a_step"]
    if episode_advantage_w != 0:
        adv = adv + episode_advantage_w * p["a_ep"]
    return S.uncanon(p["order"], np.where(p["elig"], adv, 0.0))

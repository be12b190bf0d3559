"""G2PO — Group-Graph Policy Optimization (ALGORITHMS.md §5).

Paper: arXiv 2606.22995. Reference: Nala-YN/G2PO ``g2po/core_g2po.py`` (@b8ffaf5).

Notation (§5.3), inside each task group: node(i) = anchor of row i; for an occurrence
(τ, t) the value sample is ``v = β^(T_τ − t) · R_τ`` (R_τ = episode reward, T_τ = its
number of turns); ``V(node)`` = mean of v over the node's occurrences. succ(i) = node of
the next turn, or the terminal SUCCESS (``R_τ == success_reward`` exactly, value
``success_reward``) / FAIL (value 0) after the last turn.

    comp1_i = GN over the occurrences of node(i) of  V(succ(i)) − p · invalid_i
              (p = sibling_invalid_penalty; singleton node → 0)
    comp2_i = GN over all rows of the group of  V(succ(i)) − V(node(i))
              (a group with one row → 0, §0.6 D2)
    A_i     = EPI(score, mode, "steps")_i + ω · (comp1_i + comp2_i)

Columns read: group, episode, t, anchor_key (int64[N]); reward (float64[N]);
action_valid, episode_ok, trainable (bool[N]).

Deviations: D2 (no NaN for one-row groups); exact-tie rule (N4); node values and all
statistics use eligible rows only (P5, P6) — a node with no eligible occurrence has
value 0.
"""

from __future__ import annotations

import numpy as np

from agentrl.credit import _segments as S
from agentrl.credit import breakdown as B
from agentrl.credit.registry import register_estimator
from agentrl.types import TurnTable


def successor_values(st: TurnTable, elig: np.ndarray, beta: float, success_reward: float) -> tuple[np.ndarray, np.ndarray]:
    """(V(node(i)), V(succ(i))) per row of a canonical table, float64[N] each (§5.3 steps 1–3)."""
    ep_ret = S.episode_sum(st, st.reward)
    length = S.episode_sum(st, np.ones(len(st)))
    v = beta ** (length - st.t) * ep_ret
    node, n_nodes = S.dense(st.group, st.anchor_key)
    cnt = np.bincount(node[elig], minlength=n_nodes)
    vnode = np.bincount(node[elig], weights=v[elig], minlength=n_nodes) / np.maximum(cnt, 1)
    nxt = S.next_row(st)
    terminal = np.where(ep_ret == success_reward, success_reward, 0.0)
    vsucc = np.where(nxt >= 0, vnode[node[np.maximum(nxt, 0)]], terminal)
    return vnode[node], vsucc


def _parts(table: TurnTable, mode: str, stats_over: str, beta: float, success_reward: float,
           sibling_invalid_penalty: float, c_inv: float, eps: float) -> dict:
    """The arrays of §5.3 in canonical order: st, order, elig, score, a_ep, vnode, vsucc, node, y,
    comp1, group, comp2 (float64[N] values, int64[N] codes)."""
    S.check_choice("mode", mode, S.MODES)
    st, order = S.canonical(table)
    elig = S.eligible(st)
    vnode, vsucc = successor_values(st, elig, beta, success_reward)
    node, _ = S.dense(st.group, st.anchor_key)
    y = vsucc - sibling_invalid_penalty * (~st.action_valid)
    group = S.dense(st.group)[0]
    score = S.outcome_score(st, c_inv)
    return dict(st=st, order=order, elig=elig, score=score, vnode=vnode, vsucc=vsucc, node=node, y=y, group=group,
                comp1=S.step_group_norm(y, node, elig, mode=mode, eps=eps),
                comp2=S.step_group_norm(vsucc - vnode, group, elig, mode=mode, eps=eps),
                a_ep=S.episode_term(st, score, elig, mode=mode, stats_over=stats_over, eps=eps))


def _breakdown(table: TurnTable, *, mode: str, stats_over: str, step_advantage_w: float, beta: float,
               success_reward: float, sibling_invalid_penalty: float, c_inv: float, eps: float) -> B.Breakdown:
    """G2PO's three terms: the episode term, ω × component 1 (over the node's occurrences)
    and ω × component 2 (over the task group)."""
    p = _parts(table, mode, stats_over, beta, success_reward, sibling_invalid_penalty, c_inv, eps)
    st, elig = p["st"], p["elig"]
    c1 = B.gn_term("node", "component 1 (§5.3): V(next node) − penalty·invalid, normalised over the occurrences "
                   "of this node (anchor state) in the group", p["comp1"], p["y"], p["node"], elig, elig, mode=mode,
                   keep_singleton=False, weight=step_advantage_w)
    c2 = B.gn_term("transition", "component 2 (§5.3): V(next node) − V(node), normalised over the group's turns",
                   p["comp2"], p["vsucc"] - p["vnode"], p["group"], elig, elig, mode=mode, keep_singleton=False,
                   weight=step_advantage_w)
    ep = B.episode_gn_term(st, p["score"], p["a_ep"], elig, mode=mode, stats_over=stats_over)
    return B.make_breakdown("g2po", p["order"], [ep, c1, c2], {"V(node)": p["vnode"], "V(next)": p["vsucc"]}, eps)


@register_estimator("g2po", choices={"mode": S.MODES, "stats_over": S.STATS_OVER}, breakdown=_breakdown)
def g2po(
    table: TurnTable,
    *,
    mode: str = "mean_std_norm",
    stats_over: str = "steps",
    step_advantage_w: float = 1.0,
    beta: float = 0.95,
    success_reward: float = 10.0,
    sibling_invalid_penalty: float = 0.1,
    c_inv: float = 0.1,
    eps: float = S.EPS,
) -> np.ndarray:
    """G2PO advantage per turn (§5.3).

    Args:
        table: turns (N rows).
        mode: ``"mean_std_norm"`` or ``"mean_norm"`` for all three normalisations.
        stats_over: whose scores form the episode term's statistics (§1.5): ``"steps"``
            (every step row, the reference default) or ``"trajectories"`` / ``"episodes"``
            (only the first row of each episode).
        step_advantage_w: ω.
        beta: node-value discount β (hard-coded 0.95 upstream).
        success_reward: episode reward that marks SUCCESS (exact equality) and its value.
        sibling_invalid_penalty: component-1 penalty on invalid actions (0.1 upstream).
        c_inv: invalid penalty of the episode term's score. eps: §0.5.
    Returns:
        float64[N]; 0 for failed-episode and non-trainable rows.
    Raises:
        ValueError: bad ``mode`` or duplicate (episode, t).
    """
    p = _parts(table, mode, stats_over, beta, success_reward, sibling_invalid_penalty, c_inv, eps)
    return S.uncanon(p["order"], p["a_ep"] + step_advantage_w * (p["comp1"] + p["comp2"]))

"""HiPER — Hierarchical Advantage Estimation (HAE), critic-based (ALGORITHMS.md §14).

Paper: "HiPER", arXiv 2602.16165 (ICML 2026). Reference: ``JonP07/HiPER-agent`` @ 9d3c118
(``hiper_hae/core_hae.py``, ``hiper_hae/hier_mask.py``, the trainer's HAE branch).

Every turn is written as ``<switch>KEEP|SWITCH</switch><subgoal>…</subgoal><action>…</action>``
(``policy.action_format: hiper``, ``agentrl.rollout.parsing.parse_hiper``). A turn whose switch
is not KEEP starts a segment (t = 0 always does). Notation (§14.3), per episode with turns 0..T−1, segments [s_k, e_k]::

    r_t      = reward_t + keep_penalty·[KEEP_t] (÷T in "normalized" mode, T > 1 only)
               − c_inv·invalid_t + keep_consistency_penalty·[t ≥ 1, KEEP_t, g_t ≠ g_{t−1}]
    low:     δ_t = r_t + γ·nd_t·Vnext_t − V_low[t];  A^lo_t = δ_t + γ·λ_turn·nd_t·A^lo_{t+1} (reset per segment)
             Vnext_t = V_low[t+1] inside, V_high[s_{k+1}] at a segment end, V_low[t] (own value) at a
             truncated last end with ``bootstrap_truncated``, else 0
    boot_k   = V_high[s_{k+1}]; V_high[s_k] for a truncated last segment with ``bootstrap_truncated``; else 0
    term:    ret^te_t = r_t + γ·ret^te_{t+1} inside the segment, ret^te_{e_k+1} = nd_{e_k}·boot_k
             A^te_t = ret^te_t − V_term[t]
    high:    δ^hi_k = ret^te[s_k] − V_high[s_k]   (= G_k + γ^{d_k}·nd_{e_k}·boot_k − V_high[s_k])
             A^hi_k = δ^hi_k + γ^{d_k}·λ_seg·nd_{e_k}·A^hi_{k+1}, on row s_k
    returns: ret^lo = A^lo + V_low, ret^hi = A^hi + V_high (start rows), ret^te as above

Optional whitening (``norm_adv``) of each component over its member rows with the population
std + 1e-8 (a tied member set gives 0): low = every eligible row; high = eligible segment-start
rows with a subgoal; term = eligible rows with a switch span. Per-row advantage (decision
D-14a): adv_low + adv_high + adv_term, i.e. the sum over the spans a row's tokens carry
(action span ← A^lo, subgoal span of a segment start ← A^hi, switch span ← A^te).

Columns read: episode, t (int64[N]); reward (float64[N]); terminated, action_valid, episode_ok,
trainable, switch (bool[N]); has_switch (bool[N], optional: None = every row has a switch span);
subgoal_key (int64[N], ``agentrl.types.NO_SUBGOAL`` = missing); value_low, value_high (float64[N]);
value_term (float64[N], needed when ``use_term``); bootstrap_value (with ``bootstrap="next_state"``).
Failed-episode and non-trainable rows get 0 and are left out of the whitening (P5, P6); their
rewards and values still chain the recursions of their episode.

Deviations (§14.8): subgoals compared by exact text (D-14c); ``bootstrap="next_state"`` is the
PROPOSED option of §14.5 (default ``"own"`` = upstream); P5/P6 exclusions (upstream has none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from agentrl.credit import _segments as S
from agentrl.credit.declarations import CriticHeads, SpanAdvantages
from agentrl.credit.registry import register_estimator
from agentrl.types import NO_SUBGOAL, Turn, TurnTable

KEEP_MODES = ("fixed", "normalized")
BOOTSTRAPS = ("own", "next_state")
WHITEN_EPS = 1e-8
#: (low, high) of HiPER's own hyperparameters (``register_estimator(ranges=...)``).
RANGES = {"lam_turn": (0.0, 1.0), "lam_seg": (0.0, 1.0)}
REQUIRES = ("switch", "subgoal_key", "value_low", "value_high")
#: The critic's heads (the columns they fill) and the token spans each turn trains (§14.2).
VALUE_HEADS = ("value_low", "value_high", "value_term")
SPANS = ("action", "subgoal", "switch")


@dataclass(frozen=True)
class HAE:
    """HiPER's per-span advantages and critic targets, float64[N] each, in the table's row order.

    Attributes:
        adv_low: A^lo, for the action span of every row.
        adv_high: A^hi on segment-start rows that have a subgoal span (0 elsewhere).
        adv_term: A^te on rows with a switch span (0 elsewhere, and everywhere without ``value_term``).
        ret_low: target of the "low" head, every row.
        ret_high: target of the "high" head on segment-start rows (0 elsewhere).
        ret_term: target of the "term" head, every row (0 without ``value_term``).
    With ``norm_adv`` the advantages are whitened, the returns never. Failed-episode and
    non-trainable rows have advantage 0 (returns are still filled).
    """

    adv_low: np.ndarray
    adv_high: np.ndarray
    adv_term: np.ndarray
    ret_low: np.ndarray
    ret_high: np.ndarray
    ret_term: np.ndarray


def _check(table: TurnTable, use_term: bool, bootstrap: str, keep_penalty_mode: str) -> None:
    """ValueError for missing columns, non-finite values or a bad option, naming the fix."""
    S.check_choice("keep_penalty_mode", keep_penalty_mode, KEEP_MODES)
    S.check_choice("bootstrap", bootstrap, BOOTSTRAPS)
    table.require(REQUIRES)
    if use_term and table.value_term is None:
        raise ValueError("hiper: use_term=True needs the value_term column (the critic's termination head); "
                         "enable the head or set use_term=false")
    if bootstrap == "next_state":
        table.require(["bootstrap_value"])
    for name in ("value_low", "value_term") if use_term else ("value_low",):
        if not np.all(np.isfinite(getattr(table, name))):
            raise ValueError(f"hiper: {name} has non-finite values; the critic must write a value on every row")


def segment_starts(st: TurnTable) -> np.ndarray:
    """bool[N]: segment-start rows of a canonical table (t-first row of an episode, or ``switch``)."""
    return S.first_of_episode(st) | st.switch


def segment_start_rows(table: TurnTable) -> np.ndarray:
    """bool[N] in the table's row order: the rows that start a HiPER segment (t-first row of an
    episode, or ``switch``): they carry A^hi on their subgoal span and the high head's target.

    Raises:
        ValueError: the table has no ``switch`` column, or duplicate (episode, t).
    """
    table.require(["switch"])
    st, order = S.canonical(table)
    out = np.empty(len(st), dtype=bool)
    out[order] = segment_starts(st)
    return out


def shaped_reward(st: TurnTable, *, keep_penalty: float, keep_penalty_mode: str, keep_consistency_penalty: float,
                  keep_consistency_requires_both: bool, c_inv: float) -> np.ndarray:
    """r_t of §14.3 on a canonical table (rows by (episode, t)): float64[N]."""
    n = len(st)
    keep = ~st.switch
    length = S.episode_sum(st, np.ones(n))
    if keep_penalty_mode == "fixed":
        keep_term = np.where(keep, keep_penalty, 0.0)
    else:
        keep_term = np.where(keep & (length > 1), keep_penalty / np.maximum(length, 1.0), 0.0)
    prev_g = np.full(n, NO_SUBGOAL, dtype=np.int64)
    prev_g[1:] = st.subgoal_key[:-1]
    g = st.subgoal_key
    changed = ~S.first_of_episode(st) & keep & (g != prev_g)
    if keep_consistency_requires_both:
        changed &= (g != NO_SUBGOAL) & (prev_g != NO_SUBGOAL)
    return st.reward + keep_term - c_inv * (~st.action_valid) + np.where(changed, keep_consistency_penalty, 0.0)


def _whiten(x: np.ndarray, member: np.ndarray) -> np.ndarray:
    """(x − mean)/(pop_std + 1e-8) over ``member`` rows, 0 elsewhere; a tied member set gives 0."""
    v = x[member]
    if v.size == 0:
        return np.zeros_like(x)
    if np.all(v == v[0]):
        return np.where(member, x - v[0], 0.0)
    return np.where(member, (x - v.mean()) / (v.std() + WHITEN_EPS), 0.0)


def hiper_hae(table: TurnTable, *, gamma: float = 1.0, lam_turn: float = 1.0, lam_seg: float = 0.95,
              keep_penalty: float = -0.3, keep_penalty_mode: str = "normalized", keep_consistency_penalty: float = -0.3,
              keep_consistency_requires_both: bool = True, c_inv: float = 0.1, bootstrap_truncated: bool = True,
              norm_adv: bool = True, use_term: bool = True, bootstrap: str = "own") -> HAE:
    """Hierarchical Advantage Estimation (ALGORITHMS.md §14.3; arXiv 2602.16165).

    Args:
        table: N turns with ``switch``, ``subgoal_key``, ``value_low``, ``value_high`` (finite on
            segment-start rows) and, with ``use_term``, ``value_term``.
        gamma: γ. lam_turn: GAE λ inside segments. lam_seg: GAE λ over segments.
        keep_penalty: reward added to KEEP turns (÷T in ``"normalized"`` mode, skipped when T = 1).
        keep_penalty_mode: ``"fixed"`` or ``"normalized"``.
        keep_consistency_penalty: reward added to a KEEP turn (t ≥ 1) whose subgoal differs from the
            previous turn's; ``keep_consistency_requires_both``: only when both subgoals exist.
        c_inv: penalty subtracted from r_t of an invalid action (once).
        bootstrap_truncated: a truncated (not terminated) last segment bootstraps (else from 0).
        norm_adv: whiten each component over its member rows (population std + 1e-8).
        use_term: compute A^te from ``value_term``; False gives adv_term = ret_term = 0.
        bootstrap: ``"own"`` (upstream: the last turn's own V_low, the segment's own V_high) or
            ``"next_state"`` (``bootstrap_value`` of the episode's last row, V(s_T), for both).
    Returns:
        ``HAE``: six float64[N] arrays in the table's row order.
    Raises:
        ValueError: a missing column, non-finite values, a non-finite ``value_high`` on a
            segment-start row, a bad ``keep_penalty_mode`` / ``bootstrap``, duplicate (episode, t).
    """
    _check(table, use_term, bootstrap, keep_penalty_mode)
    st, order = S.canonical(table)
    n = len(st)
    start = segment_starts(st)
    if not np.all(np.isfinite(st.value_high[start])):
        raise ValueError("hiper: value_high is not finite on a segment-start row; the critic's high head must "
                         "write V(s_t) on every turn that starts a segment")
    r = shaped_reward(st, keep_penalty=keep_penalty, keep_penalty_mode=keep_penalty_mode, c_inv=c_inv,
                      keep_consistency_penalty=keep_consistency_penalty,
                      keep_consistency_requires_both=keep_consistency_requires_both)
    nxt = S.next_row(st)
    has_next = nxt >= 0
    nx = np.maximum(nxt, 0)
    end = ~has_next | start[nx]  # last row of its segment
    inner = np.where(end, -1, nxt)  # successor inside the segment
    nd = 1.0 - st.terminated
    v_low = st.value_low
    v_high = np.where(start, st.value_high, 0.0)
    # the segment start of every row (rows are contiguous per episode, so a running max works)
    seg_start = np.maximum.accumulate(np.where(start, np.arange(n), 0)) if n else np.zeros(0, np.int64)
    trunc_boot = bootstrap_truncated & ~has_next & (nd > 0)
    if bootstrap == "next_state":
        own_low = own_high = st.bootstrap_value
    else:
        own_low, own_high = v_low, v_high[seg_start]
    v_next = np.where(~end, v_low[nx], np.where(has_next, v_high[nx], np.where(trunc_boot, own_low, 0.0)))
    delta = r + gamma * nd * v_next - v_low
    a_low = S.backward_recursion(delta, gamma * lam_turn * nd, inner, st.t)
    boot = np.where(has_next, v_high[nx], np.where(trunc_boot, own_high, 0.0))  # boot_k on end rows
    ret_te = S.backward_recursion(r + np.where(end, gamma * nd * boot, 0.0), np.full(n, float(gamma)), inner, st.t)
    # high level: one recursion over segment-start rows, successor = the next segment's start
    seg_end = np.zeros(n, dtype=np.int64)
    seg_end[seg_start[end]] = np.flatnonzero(end)
    e = seg_end[start]
    s_idx = np.flatnonzero(start)
    d = (e - s_idx + 1).astype(np.float64)
    nxt_seg = np.full(s_idx.size, -1, dtype=np.int64)
    has_nseg = nxt[e] >= 0
    pos = np.cumsum(start) - 1  # index of each row's segment among the starts
    nxt_seg[has_nseg] = pos[nxt[e][has_nseg]]
    level = pos[s_idx] - np.maximum.accumulate(np.where(S.first_of_episode(st), pos, 0))[s_idx]
    gd = np.power(float(gamma), d)
    a_hi_seg = S.backward_recursion(ret_te[s_idx] - v_high[s_idx], gd * lam_seg * nd[e], nxt_seg, level)
    a_high = np.zeros(n)
    a_high[s_idx] = a_hi_seg
    ret_high = np.where(start, a_high + v_high, 0.0)
    elig = S.eligible(st)
    span_sw = np.ones(n, bool) if st.has_switch is None else st.has_switch
    members = (elig, elig & start & (st.subgoal_key != NO_SUBGOAL), elig & span_sw)
    if use_term:
        a_term, ret_term = ret_te - st.value_term, ret_te
    else:
        a_term, ret_term = np.zeros(n), np.zeros(n)
        members = (members[0], members[1], np.zeros(n, bool))
    advs = []
    for a, m in zip((a_low, a_high, a_term), members):
        advs.append(_whiten(a, m) if norm_adv else np.where(m, a, 0.0))
    u = lambda x: S.uncanon(order, x)  # noqa: E731
    return HAE(u(advs[0]), u(advs[1]), u(advs[2]), u(a_low + v_low), u(ret_high), u(ret_term))


# --------------------------------------------------------------------------- spans and critic heads
# The update trains each span with its own advantage and the critic learns HAE's three returns
# (D-14a): ``register_estimator(spans=..., critic=...)`` below declares them, and the trainer
# serves the declarations (it never names HiPER). The agent loop (``policy.action_format: hiper``)
# records each turn's token spans in ``Turn.info["hiper_spans"]``.

def _span(turn: Turn, name: str) -> tuple[int, int] | None:
    sp = (turn.info.get("hiper_spans") or {}).get(name)
    return None if sp is None else (int(sp[0]), int(sp[1]))


def span_token_advantages(table: TurnTable, rows: np.ndarray, turns: list[Turn], kwargs: Mapping,
                          ) -> tuple[list[np.ndarray], list[np.ndarray | None]]:
    """Per-token advantages and token masks of the trained ``rows``.

    Args:
        table: the iteration's TurnTable (HiPER's columns filled).
        rows: int64[R] trained table rows; ``turns``: their ``Turn`` objects, in the same order.
        kwargs: the estimator's hyperparameters (``cfg.algorithm.kwargs``), as given to ``hiper``.
    Returns:
        (R float64[C_i] advantages, R bool[C_i] masks or None = every token), for ``build_batch``.
    """
    h = hiper_hae(table, **kwargs)
    start = segment_start_rows(table)
    use_term = bool(kwargs.get("use_term", True))
    advs, masks = [], []
    for row, turn in zip(np.asarray(rows, dtype=np.int64), turns):
        c = turn.completion_ids.size
        if "hiper_spans" not in turn.info:
            advs.append(np.full(c, h.adv_low[row] + h.adv_high[row] + h.adv_term[row]))
            masks.append(None)
            continue
        adv, mask = np.zeros(c), np.zeros(c, dtype=bool)
        parts = [("action", h.adv_low[row], True), ("subgoal", h.adv_high[row], bool(start[row])),
                 ("switch", h.adv_term[row], use_term)]
        for name, value, on in parts:
            sp = _span(turn, name)
            if on and sp is not None:
                adv[sp[0]:sp[1]], mask[sp[0]:sp[1]] = value, True
        advs.append(adv)
        masks.append(mask)
    return advs, masks


def critic_targets(table: TurnTable, kwargs: Mapping) -> tuple[np.ndarray, np.ndarray]:
    """The three heads' targets, columns (low, high, term): float64[N, 3], and where each head has
    one: bool[N, 3] (high: segment-start rows; term: every row with ``use_term``, none without)."""
    h: HAE = hiper_hae(table, **kwargs)
    start = segment_start_rows(table)
    use_term = bool(kwargs.get("use_term", True))
    n = len(table)
    mask = np.stack([np.ones(n, bool), start, np.full(n, use_term)], axis=1)
    return np.stack([h.ret_low, h.ret_high, h.ret_term], axis=1), mask


def low_value_offsets(turns: list[Turn]) -> np.ndarray:
    """int64[N]: per turn, the completion index j whose value the low head gives (§14.2): the first
    token after the subgoal span, else after the switch span, else 0 (the first response token).
    The critic reads it from the hidden state before token j (the last prompt token for j = 0)."""
    out = np.zeros(len(turns), dtype=np.int64)
    for i, turn in enumerate(turns):
        sp = _span(turn, "subgoal") or _span(turn, "switch")
        if sp is not None:
            out[i] = sp[1]
    return out


@register_estimator("hiper", requires=REQUIRES, groups_by_task=False,  # a critic baseline, no group
                    choices={"keep_penalty_mode": KEEP_MODES, "bootstrap": BOOTSTRAPS}, ranges=RANGES,
                    critic=CriticHeads(VALUE_HEADS, critic_targets, low_value_offsets), action_format="hiper",
                    spans=SpanAdvantages(SPANS, span_token_advantages))
def hiper(table: TurnTable, *, gamma: float = 1.0, lam_turn: float = 1.0, lam_seg: float = 0.95,
          keep_penalty: float = -0.3, keep_penalty_mode: str = "normalized", keep_consistency_penalty: float = -0.3,
          keep_consistency_requires_both: bool = True, c_inv: float = 0.1, bootstrap_truncated: bool = True,
          norm_adv: bool = True, use_term: bool = True, bootstrap: str = "own") -> np.ndarray:
    """HiPER's per-row advantage (§14.3, decision D-14a): adv_low + adv_high + adv_term of
    ``hiper_hae``, the sum over the spans a row's tokens carry (action, the subgoal of a
    segment start, switch).

    Defaults are the released ALFWorld script's (``run_alfworld.sh``: keep −0.3 normalized,
    consistency −0.3, ``bootstrap_truncated`` and ``norm_adv`` on); the WebShop script uses
    ``keep_penalty=-3.5, bootstrap_truncated=False``. Arguments as ``hiper_hae``.
    Returns:
        float64[N]; 0 on failed-episode and non-trainable rows.
    Raises:
        ValueError: as ``hiper_hae``.
    """
    h = hiper_hae(table, gamma=gamma, lam_turn=lam_turn, lam_seg=lam_seg, keep_penalty=keep_penalty,
                  keep_penalty_mode=keep_penalty_mode, keep_consistency_penalty=keep_consistency_penalty,
                  keep_consistency_requires_both=keep_consistency_requires_both, c_inv=c_inv,
                  bootstrap_truncated=bootstrap_truncated, norm_adv=norm_adv, use_term=use_term, bootstrap=bootstrap)
    return h.adv_low + h.adv_high + h.adv_term

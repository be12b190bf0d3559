"""OPRL — Online Process Reward Learning, published as iStar (ALGORITHMS.md §17).

Paper: "Online Process Reward Learning for Agentic Reinforcement Learning" (v1–2) / "Agentic
Reinforcement Learning with Implicit Step Rewards" (v3, ICLR 2026), arXiv 2509.19199. Reference:
``Tongyi-ConvAI/Tongyi-Character`` @ dfee104, ``CharacterRL-iStar/istar/core_istar.py``.

A second model, the implicit process reward model π_φ (the ``prm`` step scorer of
``agentrl.train``), learns by trajectory-level DPO (successes preferred over failures of the same
task group) and scores every turn of the batch with ℓ_t = Σ over the turn's completion tokens of
log π_φ − log π_θold (nats), the ``prm_logratio`` score column. The estimator itself is pure
(§17.4), per eligible row i::

    r_i     = β · prm_logratio_i
    r̃_i     = r_i / (max_j |r_j| + 1e-6)         max over the batch's eligible rows (batch_scale)
    A_S,i   = GN of r̃ in the row's task group (all eligible rows), mode; step level: singleton → 0, tie → 0
    score_i = EpReward − c_inv · invalid_i      (§1.1; r gets no penalty, D-17i)
    A_E,i   = EPI(score, mode, stats_over)_i    (§1.5)
    A_i     = A_E,i + w · A_S,i                 (w = step_advantage_w, the paper's α)

``mode="rloo"`` (the released scripts): A_E,i = n/(n−1)·(score_i − mean of the first eligible
(t = 0) scores of the group's n episodes), n = 1 keeps score_i; A_S,i = m/(m−1)·(r̃_i − mean) over
the group's m eligible rows, m = 1 gives 0; ties give 0. ``stats_over`` does not apply there.
``process_only`` returns A_S alone (upstream ``use_process_only``: unweighted).

Columns read: group, episode, t (int64[N]); reward (float64[N]); action_valid, episode_ok,
trainable (bool[N]); ``scores["prm_logratio"]`` (float64[N]).

Deviations (§17.9): statistics over every eligible row of the group, not the first row met per
trajectory (D-17d); ``mean_std_norm`` default (D-17e); ``stats_over="steps"`` default (D-17f); the
batch scale over the whole batch (D-17g); exact-tie rule (§0.5 N4). Failed-episode and
non-trainable rows enter no statistic (the batch maximum included) and get 0 (P5, P6).
"""

from __future__ import annotations

import numpy as np

from agentrl.credit import _segments as S
from agentrl.credit import breakdown as B
from agentrl.credit.registry import register_estimator
from agentrl.types import TurnTable

#: The score column the ``prm`` step scorer fills (ℓ_t in nats, float64[N]).
COLUMN = "prm_logratio"
#: Optional score column: the batch's largest |ℓ| over its eligible rows (the same on every row), which the
#: ``prm`` scorer writes so that a sub-table (one group, as the viewer rebuilds it) is scaled by the whole batch's
#: maximum (β·max|ℓ| = max|β·ℓ| exactly for β ≥ 0); absent, the table's own maximum is used.
PEAK_COLUMN = "prm_batch_absmax"
MODES = ("mean_std_norm", "mean_norm", "rloo")
#: Added to the batch's largest |r| (upstream ``istar_norm = "batch_norm"``).
SCALE_EPS = 1e-6
#: (low, high) of OPRL's own hyperparameters (``register_estimator(ranges=...)``); ``beta`` keeps the shared
#: convention [0, 1] (``agentrl.credit.registry.PARAM_RANGES``; the paper's β ∈ [0, 1]).
RANGES = {"step_advantage_w": (0.0, None)}


def step_rewards(table: TurnTable, elig: np.ndarray, *, beta: float, batch_scale: bool) -> tuple[np.ndarray, np.ndarray]:
    """The implicit step rewards of §17.4 on ``table`` (any row order).

    Args:
        table: N turns with ``scores["prm_logratio"]`` (float64[N]).
        elig: bool[N] eligible rows (``episode_ok & trainable``); the others are ignored.
        beta: β. batch_scale: divide by the largest |r| of the eligible rows plus 1e-6.
    Returns:
        (r, r̃): float64[N] each, 0 outside ``elig``.
    Raises:
        ValueError: the column is missing, not one value per row, or not finite on an eligible row.
    """
    table.require([COLUMN])
    ell = table.scores[COLUMN]
    if ell.ndim != 1:
        raise ValueError(f"oprl: scores[{COLUMN!r}] must be float64[N] (one log-ratio per turn), got shape {ell.shape}")
    bad = elig & ~np.isfinite(ell)
    if bad.any():
        raise ValueError(f"oprl: scores[{COLUMN!r}] is not finite on {int(bad.sum())} eligible row(s), first row "
                         f"{int(np.flatnonzero(bad)[0])}; the prm scorer must write a number on every ok turn")
    r = np.where(elig, beta * np.where(elig, ell, 0.0), 0.0)
    if not batch_scale:
        return r, r.copy()
    if PEAK_COLUMN in table.scores:  # the whole batch's max |ℓ|, kept by the scorer: a sub-table (one group in
        peak = beta * float(np.max(table.scores[PEAK_COLUMN][elig])) if elig.any() else 0.0  # the viewer) scales alike
    else:
        peak = float(np.max(np.abs(r[elig]))) if elig.any() else 0.0
    return r, r / (peak + SCALE_EPS)


def _rloo_factor(seg: np.ndarray, contrib: np.ndarray) -> np.ndarray:
    """float64[N] per row: n/(n−1) for its segment's n ≥ 2 contributing rows, else 1."""
    cnt = np.bincount(seg[contrib], minlength=int(seg.max()) + 1 if seg.size else 0).astype(np.float64)
    return np.where(cnt >= 2, cnt / np.maximum(cnt - 1.0, 1.0), 1.0)[seg]


def _parts(table: TurnTable, beta: float, mode: str, stats_over: str, batch_scale: bool, c_inv: float, eps: float):
    """Everything OPRL adds up, on the canonical table (rows by (episode, t)): a dict of
    ``st, order, elig, seg, score, r, rt`` and the normaliser outputs ``gn_e, gn_s`` with their
    RLOO factors ``f_e, f_s`` (1 outside ``rloo``), so A_E = f_e·gn_e and A_S = f_s·gn_s."""
    S.check_choice("mode", mode, MODES)
    S.check_choice("stats_over", stats_over, S.STATS_OVER)
    st, order = S.canonical(table)
    elig = S.eligible(st)
    seg, _ = S.dense(st.group)
    score = S.outcome_score(st, c_inv)
    r, rt = step_rewards(st, elig, beta=beta, batch_scale=batch_scale)
    ones = np.ones(len(st))
    if mode == "rloo":
        first = S.first_eligible_of_episode(st, elig)
        gn_e = S.group_norm(score, seg, first, elig, mode="mean_norm", keep_singleton=True, eps=eps)
        gn_s = S.step_group_norm(rt, seg, elig, mode="mean_norm", eps=eps)
        f_e, f_s = _rloo_factor(seg, first), _rloo_factor(seg, elig)
    else:
        gn_e = S.episode_term(st, score, elig, mode=mode, stats_over=stats_over, eps=eps)
        gn_s = S.step_group_norm(rt, seg, elig, mode=mode, eps=eps)
        f_e, f_s = ones, ones
    return dict(st=st, order=order, elig=elig, seg=seg, score=score, r=r, rt=rt, gn_e=gn_e, gn_s=gn_s, f_e=f_e,
                f_s=f_s)


def _breakdown(table: TurnTable, *, beta: float, step_advantage_w: float, mode: str, stats_over: str,
               batch_scale: bool, process_only: bool, c_inv: float, eps: float) -> B.Breakdown:
    """OPRL's terms: the episode term A_E (left out with ``process_only``) and w × the step term
    A_S, the GN of the scaled PRM reward r̃ over the task group. In ``rloo`` mode each term's
    value is ``x − mean`` and its weight carries the leave-one-out factor n/(n−1)."""
    p = _parts(table, beta, mode, stats_over, batch_scale, c_inv, eps)
    st, elig, seg = p["st"], p["elig"], p["seg"]
    gn_mode = "mean_norm" if mode == "rloo" else mode
    terms = []
    if not process_only:
        if mode == "rloo":
            terms.append(B.gn_term("episode", "episode term (§17.4, rloo): outcome score minus the group mean of "
                                   "each episode's first score, × n/(n−1) (the weight)", p["gn_e"], p["score"], seg,
                                   S.first_eligible_of_episode(st, elig), elig, mode=gn_mode, keep_singleton=True,
                                   weight=p["f_e"]))
        else:
            terms.append(B.episode_gn_term(st, p["score"], p["gn_e"], elig, mode=mode, stats_over=stats_over))
    w = 1.0 if process_only else step_advantage_w
    doc = ("step term (§17.4): the PRM's implicit step reward r̃ = β·ℓ scaled by the batch's largest |r|, "
           "normalised over every turn of the task group; a single turn gives 0")
    terms.append(B.gn_term("step", doc + (", × m/(m−1) in the weight (rloo)" if mode == "rloo" else ""), p["gn_s"],
                           p["rt"], seg, elig, elig, mode=gn_mode, keep_singleton=False, weight=w * p["f_s"]))
    return B.make_breakdown("oprl", p["order"], terms, {"prm log-ratio ℓ": st.scores[COLUMN] * elig,
                                                        "step reward r": p["r"]}, eps)


@register_estimator("oprl", requires=(COLUMN,), scorers=("prm",), ranges=RANGES, breakdown=_breakdown,
                     choices={"mode": MODES, "stats_over": S.STATS_OVER})
def oprl(
    table: TurnTable,
    *,
    beta: float = 0.05,
    step_advantage_w: float = 1.0,
    mode: str = "mean_std_norm",
    stats_over: str = "steps",
    batch_scale: bool = True,
    process_only: bool = False,
    c_inv: float = 0.1,
    eps: float = S.EPS,
) -> np.ndarray:
    """OPRL / iStar advantage per turn (ALGORITHMS.md §17.4; arXiv 2509.19199).

    Args:
        table: N turns with ``scores["prm_logratio"]`` (float64[N], ℓ_t in nats, filled by the
            ``prm`` step scorer; rows of failed episodes hold 0 and are ignored).
        beta: β, the DPO temperature: r = β·ℓ.
        step_advantage_w: w, the weight of the step term (the paper's α).
        mode: ``"mean_std_norm"`` (the paper), ``"mean_norm"`` (upstream ``istar_grpo``) or
            ``"rloo"`` (the released scripts), for both terms.
        stats_over: whose scores form the episode term's statistics (§1.5): ``"steps"`` or
            ``"trajectories"`` / ``"episodes"``; not used by ``"rloo"`` (one score per episode).
        batch_scale: divide r by the batch's largest |r| + 1e-6 (upstream ``istar_norm``).
        process_only: return the step term A_S alone (upstream ``use_process_only``).
        c_inv: invalid-action penalty on the row's own episode score (not on r, D-17i).
        eps: added to the std.
    Returns:
        float64[N]; 0 for failed-episode and non-trainable rows.
    Raises:
        ValueError: bad ``mode`` / ``stats_over``, duplicate (episode, t), a missing or malformed
            ``prm_logratio`` column or a non-finite value on an eligible row.
    """
    p = _parts(table, beta, mode, stats_over, batch_scale, c_inv, eps)
    a_s = p["f_s"] * p["gn_s"]
    out = a_s if process_only else p["f_e"] * p["gn_e"] + step_advantage_w * a_s
    return S.uncanon(p["order"], out)

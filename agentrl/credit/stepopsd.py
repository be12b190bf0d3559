"""StepOPSD — Step-Aware Online Preference Distillation (ALGORITHMS.md §18, PROPOSED details).

Paper: Zhang, Lin, Wu, "StepOPSD", arXiv 2605.27140 (no public code; §18.2). Sibling code used for
the PROPOSED choices: RLSD in ``ZJU-REAL/SDAR`` (``rlsd_utils.compute_rlsd_token_advantage``).

After the GRPO rollout each turn's scored tokens (its action span, or the whole completion) are
scored by a teacher, a stale snapshot of the policy that also sees a hindsight block (the
outcome and a successful sibling's actions): the ``hindsight`` step scorer of ``agentrl.train``
writes the per-token gap Δ = log π_T − log π_S (π_S: the stored behaviour log-probs) into the
``gap`` score column. StepOPSD never imitates the teacher: it only rescales each row's GRPO
advantage by a bounded weight, so every advantage keeps its sign (§18.4). Per row i and scored
token j::

    A_i   = GRPO advantage of row i                              (§2: EPI(score, mode, stats_over), c_inv)
    w_ij  = clip(2·σ(sign(A_i)·Δ_ij), 1 − α_clip, 1 + α_clip)    (sign(0) = 0 gives w = 1)
    W_i   = mean_j w_ij, or 1 if row i has no scored token       (the per-step budget, D-18a)
    Ã_i   = A_i · (1 − λ + λ·W_i)                                (λ = lambda_mix, the current value)

so 1 − λα ≤ Ã_i/A_i ≤ 1 + λα, and λ = 0 gives GRPO's output byte for byte. The per-token variant
(``granularity="token"``, D-18b) gives Ã_ij = A_i·(1 − λ + λ·w_ij) on the scored tokens and Ã_i on
the others; its mean over the scored tokens is Ã_i. The λ schedule lives in the config.
The update trains what ``granularity`` says: the estimator declares its token layout
(``span_token_advantages``, one span, the whole completion): ``step`` puts Ã on every completion token,
``token`` puts Ã_ij on the scored tokens — the completion range the hindsight scorer keeps in the
optional ``scores["gap_span"]`` column, float64[N, 2] ``[start, end)`` (absent or NaN: the whole
completion) — and Ã on the row's other completion tokens.

Data layout: the spec's CSR pair (``gap_values`` float64[M], ``gap_offsets`` int64[N+1]) is stored
as one padded matrix ``scores["gap"]``, float64[N, L] (L ≥ 1): row i's gaps left-aligned, NaN after
them; an all-NaN row is not scored (W = 1). A matrix with leading dimension N survives
``TurnTable.take`` (row subsets, permutations); ``gaps_from_csr`` converts.

Columns read: group, episode, t (int64[N]); reward (float64[N]); action_valid, episode_ok,
trainable (bool[N]); ``scores["gap"]`` (float64[N, L]).
Deviations: the budget W (D-18a), row granularity by default (D-18b); exact-tie rule (§0.5 N4);
failed-episode and non-trainable rows get 0 (P5, P6).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from agentrl.credit import _segments as S
from agentrl.credit import breakdown as B
from agentrl.credit.grpo import _parts as grpo_parts
from agentrl.credit.declarations import SpanAdvantages
from agentrl.credit.registry import register_estimator, validate_estimator_kwargs
from agentrl.types import Turn, TurnTable

#: The score column the ``hindsight`` step scorer fills (float64[N, L], NaN-padded).
COLUMN = "gap"
GRANULARITIES = ("step", "token")
#: Optional score column: each row's scored completion-token range ``[start, end)`` (float64[N, 2], NaN
#: where not scored; the hindsight scorer writes it). Only the per-token variant reads it; absent = the
#: whole completion.
SPAN_COLUMN = "gap_span"
RANGES = {"lambda_mix": (0.0, 1.0), "alpha_clip": (0.0, 1.0)}


def gaps_from_csr(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The ``scores["gap"]`` matrix from the spec's CSR pair (§18.3).

    Args:
        values: float64[M], the gap Δ of every scored token of every row, in row order, then token
            order (no NaN: a scored token has a number).
        offsets: int64[N+1], row i's gaps are ``values[offsets[i]:offsets[i+1]]``; an empty range
            means the row is not scored.
    Returns:
        float64[N, max(1, L)] with L the longest row: row i's gaps left-aligned, NaN after them.
    Raises:
        ValueError: ``values`` not 1-D or with NaN; ``offsets`` not 1-D integers, empty, not
            starting at 0, decreasing somewhere, or not ending at M (the message names which).
    """
    vals = np.asarray(values, dtype=np.float64)
    offs = np.asarray(offsets)
    if vals.ndim != 1:
        raise ValueError(f"gap_values must be float64[M] (1-D), got shape {vals.shape}")
    if offs.ndim != 1 or offs.size == 0:
        raise ValueError(f"gap_offsets must be int64[N+1] (1-D, at least one entry), got shape {offs.shape}")
    if offs.dtype.kind not in "iu":
        raise ValueError(f"gap_offsets must be integers, got dtype {offs.dtype}")
    offs = offs.astype(np.int64)
    if offs[0] != 0:
        raise ValueError(f"gap_offsets[0] must be 0, got {int(offs[0])}")
    steps = np.diff(offs)
    if np.any(steps < 0):
        i = int(np.flatnonzero(steps < 0)[0])
        raise ValueError(f"gap_offsets must be non-decreasing: gap_offsets[{i}] = {int(offs[i])} > "
                         f"gap_offsets[{i + 1}] = {int(offs[i + 1])}")
    if offs[-1] != vals.size:
        raise ValueError(f"gap_offsets must end at len(gap_values) = {vals.size}, got {int(offs[-1])}")
    if np.isnan(vals).any():
        raise ValueError(f"gap_values has NaN at index {int(np.flatnonzero(np.isnan(vals))[0])}; a scored token's "
                         "gap must be a number (leave an unscored row's range empty instead)")
    n = offs.size - 1
    out = np.full((n, max(1, int(steps.max(initial=0)))), np.nan)
    row = np.repeat(np.arange(n), steps)
    out[row, np.arange(vals.size) - offs[row]] = vals
    return out


def gap_matrix(table: TurnTable) -> np.ndarray:
    """``table.scores["gap"]`` checked: float64[N, L] with L ≥ 1.

    Raises:
        ValueError: the column is missing or not 2-D with at least one column.
    """
    table.require([COLUMN])
    gap = table.scores[COLUMN]
    if gap.ndim != 2 or gap.shape[1] < 1:
        raise ValueError(f"stepopsd: scores[{COLUMN!r}] must be float64[N, L] with L >= 1 (row i's token gaps "
                         f"left-aligned, NaN after them; see gaps_from_csr), got shape {gap.shape}")
    return gap


def token_weights(gap: np.ndarray, adv: np.ndarray, alpha_clip: float) -> tuple[np.ndarray, np.ndarray]:
    """The clipped token weights and the per-step budget of §18.4.

    Args:
        gap: float64[N, L], Δ per scored token, NaN where none. adv: float64[N], the GRPO advantage.
        alpha_clip: α_clip.
    Returns:
        (w float64[N, L]: clip(2σ(sign(A)·Δ), 1 ± α_clip), NaN on unscored slots;
        W float64[N]: the mean of a row's w, 1 for a row without a scored token).
    """
    scored = ~np.isnan(gap)
    sign = np.sign(adv)[:, None]
    z = sign * np.where(scored & (sign != 0), gap, 0.0)  # sign(0)·Δ = 0, also for Δ = ±inf
    w = np.clip(1.0 + np.tanh(0.5 * z), 1.0 - alpha_clip, 1.0 + alpha_clip)  # 2σ(z) = 1 + tanh(z/2)
    cnt = scored.sum(axis=1)
    W = np.where(cnt > 0, np.where(scored, w, 0.0).sum(axis=1) / np.maximum(cnt, 1), 1.0)
    return np.where(scored, w, np.nan), W


@dataclass(frozen=True)
class StepOPSDAdvantages:
    """StepOPSD's arrays, in the table's row order.

    Attributes:
        grpo: float64[N], A (the GRPO advantage).
        budget: float64[N], W (1 on rows without a scored token).
        step: float64[N], Ã = A·(1 − λ + λ·W), the estimator's per-row output.
        token: N arrays float64[L_i]: Ã_ij = A·(1 − λ + λ·w_ij) on row i's L_i scored tokens, in
            token order (empty for a row without one); their mean is ``step[i]``.
    """

    grpo: np.ndarray
    budget: np.ndarray
    step: np.ndarray
    token: tuple[np.ndarray, ...]


def _parts(table: TurnTable, lambda_mix: float, alpha_clip: float, granularity: str, mode: str, stats_over: str,
           c_inv: float, eps: float):
    """(st, order, elig, score, A, w, W, Ã), canonical order."""
    S.check_choice("granularity", granularity, GRANULARITIES)
    st, order, elig, score, adv = grpo_parts(table, mode, stats_over, c_inv, eps)
    w, budget = token_weights(gap_matrix(st), adv, alpha_clip)
    shaped = adv * ((1.0 - lambda_mix) + lambda_mix * budget)
    return st, order, elig, score, adv, w, budget, shaped


def stepopsd_advantages(table: TurnTable, *, lambda_mix: float = 0.2, alpha_clip: float = 0.05,
                        granularity: str = "step", mode: str = "mean_std_norm", stats_over: str = "steps",
                        c_inv: float = 0.1, eps: float = S.EPS) -> StepOPSDAdvantages:
    """StepOPSD's step and per-token advantages (§18.4; arXiv 2605.27140). Arguments as ``stepopsd``.

    Returns:
        ``StepOPSDAdvantages`` (A, W, Ã per row and Ã_ij per scored token), in the table's row order.
    Raises:
        ValueError: as ``stepopsd``.
    """
    st, order, _, _, adv, w, budget, shaped = _parts(table, lambda_mix, alpha_clip, granularity, mode, stats_over,
                                                     c_inv, eps)
    tok = adv[:, None] * ((1.0 - lambda_mix) + lambda_mix * w)
    per_row = [row[~np.isnan(wr)] for row, wr in zip(tok, w)]
    token = [np.zeros(0)] * len(st)
    for i, j in enumerate(order):
        token[j] = per_row[i]
    return StepOPSDAdvantages(S.uncanon(order, adv), S.uncanon(order, budget), S.uncanon(order, shaped), tuple(token))


def span_token_advantages(table: TurnTable, rows: np.ndarray, turns: list[Turn], kwargs: Mapping,
                          ) -> tuple[list[np.ndarray], list[None]]:
    """Per-token advantages of the trained ``rows`` (D-18b; the estimator's ``SpanAdvantages``).

    ``granularity="step"``: every completion token carries the row's Ã. ``"token"``: the scored
    segment, ``scores["gap_span"][row] = [start, end)`` (absent or NaN: the whole completion),
    carries Ã_ij token by token and the row's other completion tokens carry Ã; a row without scored
    tokens carries Ã everywhere. Every completion token trains.

    Args:
        table: the iteration's TurnTable with ``scores["gap"]`` (and optionally ``"gap_span"``).
        rows: int64[R] trained table rows; ``turns``: their ``Turn`` objects, in the same order.
        kwargs: the estimator's hyperparameters in effect (defaults filled in here).
    Returns:
        (R float64[C_i] advantages, R × None masks), for ``build_batch``.
    Raises:
        ValueError: as ``stepopsd``, or a scored segment whose length differs from the row's number
            of gaps or that does not fit in the completion.
    """
    kw = validate_estimator_kwargs("stepopsd", dict(kwargs))
    res = stepopsd_advantages(table, **kw)
    spans = table.scores.get(SPAN_COLUMN)
    advs = []
    for row, turn in zip(np.asarray(rows, dtype=np.int64), turns):
        c = int(turn.completion_ids.size)
        adv = np.full(c, res.step[row])
        tok = res.token[row]
        if kw["granularity"] == "token" and tok.size:
            span = None if spans is None or np.isnan(spans[row]).any() else spans[row]
            start, end = (0, c) if span is None else (int(span[0]), int(span[1]))
            if end - start != tok.size or not 0 <= start <= end <= c:
                raise ValueError(f"stepopsd: turn {turn.turn_id} (episode {turn.episode_id}, t={turn.t}) has "
                                 f"{tok.size} token gaps but its scored segment is [{start}, {end}) of {c} "
                                 f"completion tokens; the hindsight scorer must write scores[{SPAN_COLUMN!r}]")
            adv[start:end] = tok
        advs.append(adv)
    return advs, [None] * len(advs)


def _breakdown(table: TurnTable, *, lambda_mix: float, alpha_clip: float, granularity: str, mode: str,
               stats_over: str, c_inv: float, eps: float) -> B.Breakdown:
    """StepOPSD's two terms: the GRPO episode term A and the shaping term A·(W − 1) with weight λ."""
    st, order, elig, score, adv, _, budget, _ = _parts(table, lambda_mix, alpha_clip, granularity, mode, stats_over,
                                                       c_inv, eps)
    n = len(st)
    nan = np.full(n, np.nan)
    shaping = B.Term("shaping", "hindsight shaping (§18.4): A·(W − 1), W = the row's mean clipped teacher weight "
                     "clip(2σ(sign(A)·Δ), 1 ± α_clip) over its scored tokens (1 if none), weight λ", adv * (budget - 1.0),
                     np.full(n, float(lambda_mix)), budget, np.full(n, -1, np.int64), np.zeros(n, np.int64), nan, nan,
                     "A·(W − 1)")
    return B.make_breakdown("stepopsd", order, [B.episode_gn_term(st, score, adv, elig, mode=mode,
                                                                  stats_over=stats_over), shaping],
                            {"budget W": budget}, eps)


@register_estimator("stepopsd", requires=(COLUMN,), scorers=("hindsight",), ranges=RANGES, breakdown=_breakdown,
                    spans=SpanAdvantages(("completion",), span_token_advantages), choices={"granularity": GRANULARITIES, "mode": S.MODES, "stats_over": S.STATS_OVER})
def stepopsd(
    table: TurnTable,
    *,
    lambda_mix: float = 0.2,
    alpha_clip: float = 0.05,
    granularity: str = "step",
    mode: str = "mean_std_norm",
    stats_over: str = "steps",
    c_inv: float = 0.1,
    eps: float = S.EPS,
) -> np.ndarray:
    """StepOPSD advantage per turn, the step form Ã (§18.4; arXiv 2605.27140).

    Args:
        table: N turns with ``scores["gap"]`` (float64[N, L]: row i's token gaps Δ left-aligned,
            NaN after them, all NaN = not scored; filled by the ``hindsight`` step scorer).
        lambda_mix: λ, the current mixing weight (the config's schedule decays it; 0 = GRPO).
        alpha_clip: α_clip, the token weights' clip range 1 ± α_clip.
        granularity: ``"step"`` or ``"token"``: how the update spreads a row's credit over its
            completion tokens (``span_token_advantages``); the per-row output (stored, logged) is the
            step form Ã either way, the mean of the token form over the scored tokens.
        mode, stats_over, c_inv, eps: GRPO's (§2).
    Returns:
        float64[N]; 0 for failed-episode and non-trainable rows (A = 0 there).
    Raises:
        ValueError: bad ``granularity`` / ``mode`` / ``stats_over``, duplicate (episode, t), a
            missing or malformed ``gap`` column.
    """
    st, order, _, _, _, _, _, shaped = _parts(table, lambda_mix, alpha_clip, granularity, mode, stats_over, c_inv, eps)
    return S.uncanon(order, shaped)

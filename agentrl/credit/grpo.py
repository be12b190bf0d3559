"""GRPO family: std-normalised GRPO, mean-only GRPO and Dr.GRPO (ALGORITHMS.md §2).

Papers: GRPO — Shao et al., "DeepSeekMath", arXiv 2402.03300; Dr.GRPO — Liu et al.,
"Understanding R1-Zero-Like Training", arXiv 2503.20783. Reference: verl-agent
``core_algos.compute_grpo_outcome_advantage`` (episode reward written on every step).

Notation (§1.1, §1.5): ``score_i = EpReward(episode(i)) − c_inv · invalid_i``;
``A_i = EPI(score, mode, stats_over)_i``, the group normaliser GN inside each task group
with the episode-level singleton rule (one contributing value → ``score/(1+eps)``).

Columns read: group, episode, t (int64[N]); reward (float64[N]); action_valid,
episode_ok, trainable (bool[N]).

Deviations from the reference: exact-tie rule (§0.5 N4, D1); failed episodes and
non-trainable rows take no part in the statistics and get 0 (PITFALLS P5, P6).
Dr.GRPO's second ingredient (``seq-mean-token-sum-norm`` loss aggregation) lives in
``agentrl.update``; its advantage is the mean-only one (§2.2).
"""

from __future__ import annotations

import numpy as np

from agentrl.credit import _segments as S
from agentrl.credit import breakdown as B
from agentrl.credit.registry import register_estimator
from agentrl.types import TurnTable


def _parts(table: TurnTable, mode: str, stats_over: str, c_inv: float, eps: float):
    """(canonical table, order, eligible, score, advantage) — float64[N] arrays, canonical order."""
    S.check_choice("mode", mode, S.MODES)
    st, order = S.canonical(table)
    elig = S.eligible(st)
    score = S.outcome_score(st, c_inv)
    return st, order, elig, score, S.episode_term(st, score, elig, mode=mode, stats_over=stats_over, eps=eps)


def _grpo(table: TurnTable, mode: str, stats_over: str, c_inv: float, eps: float) -> np.ndarray:
    _, order, _, _, adv = _parts(table, mode, stats_over, c_inv, eps)
    return S.uncanon(order, adv)


def _breakdown(name: str, table: TurnTable, mode: str, stats_over: str, c_inv: float, eps: float) -> B.Breakdown:
    """One term: the episode term (the whole GRPO advantage)."""
    st, order, elig, score, adv = _parts(table, mode, stats_over, c_inv, eps)
    return B.make_breakdown(name, order, [B.episode_gn_term(st, score, adv, elig, mode=mode, stats_over=stats_over)],
                            eps=eps)


def _grpo_breakdown(table: TurnTable, *, mode: str, stats_over: str, c_inv: float, eps: float) -> B.Breakdown:
    return _breakdown("grpo", table, mode, stats_over, c_inv, eps)


def _mean_breakdown(name: str):
    def fn(table: TurnTable, *, stats_over: str, c_inv: float, eps: float) -> B.Breakdown:
        return _breakdown(name, table, "mean_norm", stats_over, c_inv, eps)
    return fn


@register_estimator("grpo", choices={"mode": S.MODES, "stats_over": S.STATS_OVER}, breakdown=_grpo_breakdown)
def grpo(
    table: TurnTable, *, mode: str = "mean_std_norm", stats_over: str = "steps", c_inv: float = 0.1, eps: float = S.EPS
) -> np.ndarray:
    """GRPO advantage (§2.2): EPI of the outcome score.

    Args:
        table: turns (N rows).
        mode: ``"mean_std_norm"`` (divide by unbiased std + eps) or ``"mean_norm"``.
        stats_over: ``"steps"`` (every step row counts; verl-agent default) or
            ``"trajectories"`` = ``"episodes"`` (only the first row of each episode counts; classic GRPO).
        c_inv: invalid-action penalty on the row's own score (§1.1).
        eps: added to the std (§0.5 N3).
    Returns:
        float64[N]; 0 for rows of failed episodes and non-trainable rows.
    Raises:
        ValueError: bad ``mode`` / ``stats_over`` or duplicate (episode, t).
    """
    return _grpo(table, mode, stats_over, c_inv, eps)


@register_estimator("grpo_mean", choices={"stats_over": S.STATS_OVER}, breakdown=_mean_breakdown("grpo_mean"))
def grpo_mean(table: TurnTable, *, stats_over: str = "steps", c_inv: float = 0.1, eps: float = S.EPS) -> np.ndarray:
    """Mean-only GRPO (§2.2): ``score − group mean``; same arguments as ``grpo``."""
    return _grpo(table, "mean_norm", stats_over, c_inv, eps)


@register_estimator("dr_grpo", choices={"stats_over": S.STATS_OVER}, breakdown=_mean_breakdown("dr_grpo"))
def dr_grpo(table: TurnTable, *, stats_over: str = "steps", c_inv: float = 0.1, eps: float = S.EPS) -> np.ndarray:
    """Dr.GRPO advantage (§2.2, arXiv 2503.20783): the mean-only GRPO advantage. Pair it
    with the ``seq-mean-token-sum-norm`` loss aggregation of ``agentrl.update``."""
    return _grpo(table, "mean_norm", stats_over, c_inv, eps)

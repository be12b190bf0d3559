"""Rows the turn store returns besides ``Turn``/``Episode``/``TurnTable``."""

from __future__ import annotations

from dataclasses import dataclass

from agentrl.failures import failure_cause
from agentrl.types import EpisodeStatus


@dataclass(frozen=True, slots=True)
class EpisodeRecord:
    """Summary of one stored episode (no turns).

    Attributes:
        run_id: the run.
        episode_id, group_id: ids within the run (int).
        env_id, task_id, seed: what was played.
        status: the episode's ``EpisodeStatus``; ``error`` says why when not ok.
        n_turns: number of stored turns (int).
        return_: sum of rewards (float), ``None`` when a turn was unscored.
        success: the last turn reported ``info["won"]``.
        created_at: write time (Unix seconds).
    """

    run_id: str
    episode_id: int
    group_id: int
    env_id: str
    task_id: str
    seed: int
    status: EpisodeStatus
    error: str
    n_turns: int
    return_: float | None
    success: bool
    created_at: float

    @property
    def cause(self) -> str:
        """Why the episode failed, one of ``agentrl.failures.FAILURE_CAUSES`` ("" when ok or unclassified)."""
        return failure_cause(self.error)


@dataclass(frozen=True, slots=True)
class AdvantageRecord:
    """One advantage written by the trainer for one turn.

    Attributes:
        turn_id: the turn (unique within ``run_id``).
        iteration: trainer iteration that computed it (int).
        estimator: registered estimator name, e.g. ``"gigpo"``.
        value: the advantage (float, dimensionless).
    """

    run_id: str
    turn_id: int
    iteration: int
    estimator: str
    value: float


@dataclass(frozen=True, slots=True)
class MetricRecord:
    """One per-iteration scalar metric (e.g. ``"loss/policy"``) of a run."""

    run_id: str
    iteration: int
    name: str
    value: float

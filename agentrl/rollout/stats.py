"""Per-iteration rollout statistics over a list of episodes (success, return, length, ...)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from agentrl.types import Episode, EpisodeStatus


@dataclass(frozen=True)
class RolloutStats:
    """Summary of a batch of episodes. Rates are fractions in [0, 1]; means are over the
    episodes whose status is ok (failed episodes are counted in ``failed_rate`` only).

    Attributes:
        episodes: number of episodes. turns: number of turns (all episodes).
        success_rate: fraction of ok episodes with ``success``.
        mean_return: mean episode return of ok episodes (NaN when none).
        mean_turns: mean turns per ok episode.
        invalid_rate: fraction of turns (ok episodes) whose action was invalid.
        failed_rate: fraction of episodes whose status is not ok.
        completion_tokens: total sampled tokens.
    """

    episodes: int
    turns: int
    success_rate: float
    mean_return: float
    mean_turns: float
    invalid_rate: float
    failed_rate: float
    completion_tokens: int

    def as_metrics(self, prefix: str = "rollout/") -> dict[str, float]:
        return {prefix + k: float(v) for k, v in self.__dict__.items()}


def rollout_stats(episodes: Sequence[Episode]) -> RolloutStats:
    """Compute ``RolloutStats`` (see its docstring) for ``episodes``."""
    ok = [e for e in episodes if e.status == EpisodeStatus.OK and e.return_ is not None]
    turns_ok = [t for e in ok for t in e.turns]
    nan = float("nan")
    return RolloutStats(
        episodes=len(episodes),
        turns=sum(len(e.turns) for e in episodes),
        success_rate=float(np.mean([e.success for e in ok])) if ok else nan,
        mean_return=float(np.mean([e.return_ for e in ok])) if ok else nan,
        mean_turns=float(np.mean([len(e.turns) for e in ok])) if ok else nan,
        invalid_rate=float(np.mean([not t.action_valid for t in turns_ok])) if turns_ok else nan,
        failed_rate=(len(episodes) - len(ok)) / len(episodes) if episodes else nan,
        completion_tokens=int(sum(t.completion_ids.size for e in episodes for t in e.turns)),
    )

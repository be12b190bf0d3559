"""``stats_over="trajectories"`` counts each episode once, by its first *trainable* row: an
episode whose t = 0 turn is not trainable (a proxy call aborted, or superseded by a harness
retry, or a text-only turn) used to drop out of its group's statistics, so with the other
episodes tied its rows were divided by eps (advantage 1e6)."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.credit import compute_advantages
from agentrl.types import Episode, Turn, TurnTable


def _episode(eid: int, reward: float, *, first_trainable: bool = True) -> Episode:
    turns = []
    for t in range(2):
        tokens = first_trainable or t == 1
        comp = np.array([7, 8], np.int32) if tokens else np.zeros(0, np.int32)
        turns.append(Turn(run_id="r", episode_id=eid, group_id=0, t=t, observation="o", anchor_obs=f"s{t}",
                          action="go", action_valid=True, reward=reward if t == 1 else 0.0, terminated=t == 1,
                          prompt_ids=np.arange(3 + t, dtype=np.int32), completion_ids=comp,
                          completion_logprobs=np.full(comp.size, -0.5, np.float32), turn_id=eid * 10 + t,
                          info={} if tokens else {"trainable": False, "superseded_by_retry": True}))
    return Episode(episode_id=eid, group_id=0, env_id="agentrl/Toy-v0", task_id="x", seed=0, turns=turns)


@pytest.mark.parametrize("estimator", ["grpo", "gigpo", "g2po", "graphgpo"])
@pytest.mark.parametrize("stats_over", ["trajectories", "episodes"])
def test_an_untrainable_first_turn_keeps_the_episode_in_the_statistics(estimator: str, stats_over: str) -> None:
    eps = [_episode(0, 1.0, first_trainable=False), _episode(1, 0.0), _episode(2, 0.0)]
    table = TurnTable.from_episodes(eps)
    assert table.trainable.tolist() == [False] + [True] * 5
    adv = compute_advantages(table, estimator, stats_over=stats_over)
    assert adv[0] == 0.0 and np.all(np.abs(adv) < 10), adv  # was ~1e6 on row 1
    if estimator == "grpo":  # scores {1, 0, 0}, one per episode: (1 - 1/3) / std
        np.testing.assert_allclose(adv[1], (2 / 3) / np.std([1.0, 0.0, 0.0], ddof=1) / (1 + 1e-6) * 1.0, rtol=1e-5)

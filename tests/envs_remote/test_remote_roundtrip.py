"""Round trip on one machine: ``agentrl envs serve`` serves TextWorld-CU1 and WebShop over
OpenEnv, ``agentrl/Remote-v0`` plays them back, and the walkthrough policy scores the same
through the round trip as directly (the same tasks, rewards, wins, turns)."""

from __future__ import annotations

import pytest
from servers import cli_server

from agentrl.env import DataMissingError, MissingExtraError, make
from agentrl.rollout.request import RolloutRequest
from agentrl.rollout.scripted import run_scripted
from agentrl.types import EpisodeStatus


def _played(env_id: str, env_kwargs: dict, episodes: int = 4) -> list[tuple]:
    eps = []
    run_scripted(RolloutRequest(env_id=env_id, policy="walkthrough", episodes=episodes, seed=0, max_turns=20,
                                env_kwargs=env_kwargs, num_slots=2, num_workers=1), eps.append)
    assert all(e.status == EpisodeStatus.OK for e in eps), [e.error for e in eps]
    return sorted((e.seed, e.task_id, tuple(t.action for t in e.turns), tuple(t.reward for t in e.turns),
                   tuple(t.action_valid for t in e.turns), bool(e.turns[-1].info["won"]), e.turns[-1].terminated)
                  for e in eps)


@pytest.mark.parametrize("env_id", ["agentrl/TextWorld-CU1-v0", "agentrl/WebShop-v0"])
def test_walkthrough_scores_the_same_through_the_openenv_round_trip(env_id):
    try:
        make(env_id).close()
    except (MissingExtraError, DataMissingError) as exc:
        pytest.skip(str(exc))
    direct = _played(env_id, {})
    assert sum(d[5] for d in direct) >= 3  # the walkthroughs win
    with cli_server(env_id, "--slots", "2") as (_, url):
        remote = _played("agentrl/Remote-v0", {"base_url": url})
    assert remote == direct

"""Faults through ``agentrl/Remote-v0``: a server killed mid-episode gives an ``env_error``
episode (flagged, not scored) and the pool goes on; a slow server hits the request timeout;
bad URLs and protocol mismatches are one-line errors."""

from __future__ import annotations

import pytest
from servers import cli_server, nemo_gym_standin, openenv_thread_server, thread_server

from agentrl.env import EnvPool, check_env_kwargs, make
from agentrl.env.contract import INFO_ENV_ERROR
from agentrl.rollout.request import RolloutRequest
from agentrl.rollout.scripted import run_scripted
from agentrl.types import EpisodeStatus


def test_server_killed_mid_episode_is_env_error_and_the_pool_goes_on():
    with cli_server("agentrl/Toy-v0", "--slots", "2") as (proc, url):
        with EnvPool("agentrl/Remote-v0", 2, env_kwargs={"base_url": url, "request_timeout_s": 5.0},
                     num_workers=1, step_timeout_s=10.0) as pool:
            assert all(r.error is None for r in pool.reset([0, 1], [0, 1]).values())
            assert all(r.error is None for r in pool.step({0: "look", 1: "look"}).values())
            proc.kill()
            proc.wait()
            res = pool.step({0: "look", 1: "look"})
            for r in res.values():
                assert r.error is None and r.terminated and r.reward == 0.0
                assert "OpenEnv step" in r.info[INFO_ENV_ERROR] and "\n" not in r.info[INFO_ENV_ERROR]
            again = pool.reset([0], [2])[0]  # no server: the reset fails, reported, the pool lives
            assert again.error and "OpenEnv reset" in again.error and pool.restarts == 0


def test_slow_server_hits_the_request_timeout():
    with openenv_thread_server("agentrl-test/Slow-v0", slots=1, env_kwargs={"delay_s": 3.0}) as url:
        env = make("agentrl/Remote-v0", base_url=url, request_timeout_s=1.0)
        env.reset(seed=0)
        obs, reward, term, trunc, info = env.step("look")
        assert term and not trunc and reward == 0.0 and obs == ""
        assert "TimeoutError" in info[INFO_ENV_ERROR] and "within the request timeout" in info[INFO_ENV_ERROR]
        env.close()
        eps = []  # through a rollout: the episode is env_error (stored, never scored), not a 0-reward ok
        run_scripted(RolloutRequest(env_id="agentrl/Remote-v0", policy="walkthrough", episodes=1, num_slots=1,
                                    num_workers=1, env_kwargs={"base_url": url, "request_timeout_s": 1.0}), eps.append)
        (ep,) = eps
        assert ep.status == EpisodeStatus.ENV_ERROR and "TimeoutError" in ep.error and not ep.turns


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"base_url": "not a url"}, "is not a server URL; write it as http://HOST:PORT"),
    ({"base_url": "http://127.0.0.1:1"}, "no server answers at http://127.0.0.1:1/metadata"),
    ({"base_url": "http://127.0.0.1:8000", "protocol": "grpc"}, "unknown protocol 'grpc'"),
    ({"base_url": "http://127.0.0.1:1", "protocol": "nemo-gym"}, "needs tasks="),
])
def test_bad_urls_and_options_are_one_line(kwargs, match):
    with pytest.raises(ValueError, match=match) as ei:
        make("agentrl/Remote-v0", **kwargs)
    assert "\n" not in str(ei.value)
    with pytest.raises(ValueError, match=match):  # the pre-flight check of configs and `agentrl rollout`
        check_env_kwargs("agentrl/Remote-v0", kwargs)


def test_protocol_mismatch_is_one_line():
    with thread_server(nemo_gym_standin()) as nemo_url:
        with pytest.raises(ValueError, match="does not speak openenv.*protocol='nemo-gym'") as ei:
            make("agentrl/Remote-v0", base_url=nemo_url)
        assert "\n" not in str(ei.value)
    with openenv_thread_server("agentrl/Toy-v0", slots=1) as oe_url:
        with pytest.raises(ValueError, match="does not speak nemo-gym.*protocol='openenv'") as ei:
            make("agentrl/Remote-v0", base_url=oe_url, protocol="nemo-gym", tasks=[{"task_id": "a"}])
        assert "\n" not in str(ei.value)

"""``agentrl envs serve --protocol openenv``: OpenEnv's official client plays an agentrl env
served this way; the token gate; capacity; one-line CLI errors."""

from __future__ import annotations

import httpx
import pytest
from servers import cli_server, openenv_thread_server

from agentrl.cli import main


def test_official_openenv_client_plays_served_toy_walkthrough():
    from openenv.core.generic_client import GenericEnvClient

    with cli_server("agentrl/Toy-v0", "--slots", "2") as (_, url):
        assert httpx.get(f"{url}/health").json() == {"status": "healthy"}
        meta = httpx.get(f"{url}/metadata").json()
        assert meta["name"] == "agentrl/Toy-v0" and meta["version"] == "agentrl-openenv-1"
        schema = httpx.get(f"{url}/schema").json()
        assert "message" in schema["action"]["properties"] and "text" in schema["observation"]["properties"]
        with GenericEnvClient(base_url=url).sync() as env:
            first = env.reset(seed=3)
            info = first.observation["info"]
            assert first.observation["text"].startswith("You are in room 1") and not first.done
            assert info["task_id"] == "rooms5-key3-door2" and info["admissible_actions"]
            rewards = []
            for action in info["walkthrough"]:
                res = env.step({"message": action})
                rewards.append(res.reward)
            assert res.done and res.observation["info"]["won"] and res.observation["terminated"]
            assert not res.observation["truncated"] and rewards[-1] == 1.0 and sum(rewards) == 1.0
            assert env.state()["step_count"] == len(info["walkthrough"])
            with pytest.raises(RuntimeError, match="EXECUTION_ERROR"):  # the episode ended: reset first
                env.step({"message": "look"})


def test_token_gate_and_capacity():
    from openenv.core.generic_client import GenericEnvClient

    from agentrl.env import make

    with openenv_thread_server("agentrl/Toy-v0", slots=1, token="s3cret") as url:
        assert httpx.get(f"{url}/health").status_code == 200  # liveness stays open
        assert httpx.get(f"{url}/metadata").status_code == 401
        assert httpx.get(f"{url}/metadata", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        with pytest.raises(ConnectionError):  # the official client sends no header: refused
            GenericEnvClient(base_url=url).sync().connect()
        with pytest.raises(ValueError, match="wants a token") as ei:
            make("agentrl/Remote-v0", base_url=url)
        assert "\n" not in str(ei.value)
        env = make("agentrl/Remote-v0", base_url=url, token="s3cret")
        obs, info = env.reset(seed=0)
        assert obs and info["remote_protocol"] == "openenv"
        other = make("agentrl/Remote-v0", base_url=url, token="s3cret")  # a second session: over capacity
        with pytest.raises(RuntimeError, match="OpenEnv reset at .* failed"):  # the server closes it (CAPACITY_REACHED)
            other.reset(seed=1)
        env.close()  # frees the slot
        assert other.reset(seed=1)[0]
        other.close()


def test_cli_bad_options_are_one_line(capsys):
    assert main(["envs", "serve", "agentrl/Toy-v0", "--protocol", "grpc"]) == 2
    assert main(["envs", "serve", "agentrl/Toy-v0", "--env-kwargs", "{oops"]) == 2
    assert main(["envs", "serve", "agentrl/Toyy-v0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3, err
    assert "unknown protocol 'grpc'" in err[0] and "--env-kwargs is not JSON" in err[1] and "agentrl/Toy-v0" in err[2]

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


def test_a_reaped_session_cannot_lease_a_slot_again():
    """Issue 52, defect 2: OpenEnv's reaper closes an idle session (its slot is freed) but leaves
    the WebSocket open; a reset on it used to lease a slot outside OpenEnv's count that was never
    released (with --slots 1 the server then refused everyone). Now that reset is refused and the
    slot stays free for the next client."""
    import time

    from openenv.core.generic_client import GenericEnvClient
    from servers import thread_server

    from agentrl.envserve.dispatch import PoolHub
    from agentrl.envserve.openenv_app import build_openenv_app

    hub = PoolHub("agentrl/Toy-v0", 1, num_workers=1)
    try:
        with thread_server(build_openenv_app(hub, session_timeout_s=0.5)) as url:
            idle = GenericEnvClient(base_url=url).sync()
            idle.connect()
            idle.reset(seed=0)
            assert hub.in_use == 1
            deadline = time.monotonic() + 20  # the reaper checks every max(timeout / 4, 5 s)
            while hub.in_use and time.monotonic() < deadline:
                time.sleep(0.2)
            assert hub.in_use == 0  # reaped: the slot is free
            with pytest.raises(RuntimeError, match="session was closed"):
                idle.reset(seed=1)
            assert hub.in_use == 0
            idle.close()
            with GenericEnvClient(base_url=url).sync() as fresh:  # the one slot serves the next client
                assert fresh.reset(seed=2).observation["text"]
                assert hub.in_use == 1
            deadline = time.monotonic() + 5
            while hub.in_use and time.monotonic() < deadline:
                time.sleep(0.05)
            assert hub.in_use == 0  # released exactly once, at disconnect
    finally:
        hub.close()


def test_one_shot_http_step_is_a_409_not_a_500():
    with openenv_thread_server("agentrl/Toy-v0", slots=1) as url:
        resp = httpx.post(f"{url}/step", json={"action": {"message": "look"}})
        assert resp.status_code == 409 and "WebSocket session" in resp.json()["detail"]
        reset = httpx.post(f"{url}/reset", json={"seed": 3})  # the one-shot reset works and frees its slot
        assert reset.status_code == 200 and reset.json()["observation"]["text"].startswith("You are in room 1")
        again = httpx.post(f"{url}/reset", json={"seed": 4})
        assert again.status_code == 200


def test_a_token_on_the_command_line_is_warned_about(monkeypatch, capsys):
    import agentrl.envserve as envserve

    seen = []
    monkeypatch.setattr(envserve, "serve_env", lambda opts, on_ready: (seen.append(opts.token), on_ready("http://h:1")))
    assert main(["envs", "serve", "agentrl/Toy-v0", "--token", "s3cret"]) == 0
    err = capsys.readouterr().err
    assert "--token is visible to every user of this machine" in err and "AGENTRL_SERVE_TOKEN" in err
    monkeypatch.setenv("AGENTRL_SERVE_TOKEN", "from-env")
    assert main(["envs", "serve", "agentrl/Toy-v0"]) == 0
    out = capsys.readouterr()
    assert "visible" not in out.err and "(token required)" in out.out
    assert seen == ["s3cret", "from-env"]


def test_a_new_session_waits_for_a_slot_a_closing_session_releases():
    """Seen under load (fresh-clone suite, 2026-12-07): a 2-slot client closed a session and opened the
    next at once, the server ran the old session's close after the new one's reset, and the reset was
    refused (all slots in use). A lease now waits up to ``LEASE_WAIT_S`` for a release."""
    import threading
    import time

    from agentrl.envserve.dispatch import LEASE_WAIT_S, HubCapacityError, PoolHub

    assert LEASE_WAIT_S >= 1.0
    hub = PoolHub("agentrl/Toy-v0", 1, num_workers=1)
    try:
        slot = hub.lease()
        with pytest.raises(HubCapacityError, match="all 1 slots of agentrl/Toy-v0 are in use"):
            hub.lease(wait_s=0.2)  # nothing releases it: refused after the wait
        threading.Timer(0.3, hub.release, (slot,)).start()  # the closing session's release, late
        t0 = time.monotonic()
        assert hub.lease(wait_s=LEASE_WAIT_S) == slot
        assert 0.2 < time.monotonic() - t0 < LEASE_WAIT_S and hub.in_use == 1
    finally:
        hub.close()

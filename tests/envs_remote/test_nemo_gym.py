"""``agentrl/Remote-v0`` with ``protocol="nemo-gym"`` against a NeMo-Gym GymnasiumServer
stand-in (tests/envs_remote/servers.py, written from the protocol's documentation): the
prompt row, cookie sessions, the Responses-object action, explicit close, provenance."""

from __future__ import annotations

from servers import nemo_gym_standin, thread_server

from agentrl.env import EnvPool, make

ROWS = [{"task_id": f"toy-{i}", "seed": i,
         "responses_create_params": {"input": [{"role": "system", "content": "Play the game."},
                                               {"role": "user", "content": [{"type": "input_text",
                                                                            "text": f"Task {i}."}]}]}}
        for i in range(3)]


def _walk(env, seed):
    obs, info = env.reset(seed=seed)
    total, steps = 0.0, 0
    for a in info["walkthrough"]:
        obs, r, term, trunc, inf = env.step(a)
        total, steps = total + r, steps + 1
        if term or trunc:
            break
    return obs, info, total, term, inf


def test_nemo_gym_standin_played_through_remote_v0():
    direct = make("agentrl/Toy-v0")
    app = nemo_gym_standin()
    with thread_server(app) as url:
        env = make("agentrl/Remote-v0", base_url=url, protocol="nemo-gym", env_name="standin", tasks=ROWS)
        for seed in (0, 1, 4):
            obs, info, total, term, last = _walk(env, seed)
            row = ROWS[seed % 3]
            first, dinfo = direct.reset(seed=row["seed"])
            assert info["task_id"] == row["task_id"]
            assert env.reset(seed=seed)[0] == f"Play the game.\n\nTask {seed % 3}.\n\n{first}"  # prompt + obs
            assert total == 1.0 and term and last["won"] and last["won_source"] == "server"
            assert info["remote_protocol"] == "nemo-gym" and info["remote_server"] == "standin"
        env.close()
        assert app.state.closed >= 6 and not app.state.sessions  # a close before every reset, and at the end
        assert app.state.rows[0]["responses_create_params"] == ROWS[0]["responses_create_params"]


def test_nemo_gym_sessions_are_cookies_and_won_is_inferred_when_the_server_is_silent():
    app = nemo_gym_standin(explicit_close=False)
    with thread_server(app) as url:
        with EnvPool("agentrl/Remote-v0", 2, env_kwargs={"base_url": url, "protocol": "nemo-gym", "tasks": ROWS},
                     num_workers=1) as pool:
            res = pool.reset([0, 1], [0, 1])
            assert res[0].info["task_id"] == "toy-0" and res[1].info["task_id"] == "toy-1"
            assert len(app.state.sessions) == 2  # one cookie session each
    from agentrl_envs.remote.env import WON_INFERRED, RemoteEnv
    from agentrl_envs.remote.wire import RemoteReply

    env = RemoteEnv.__new__(RemoteEnv)
    env.client = type("C", (), {"server_info": type("S", (), {"protocol": "p", "protocol_version": "v",
                                                              "server": "s"})()})()
    info = env._info(RemoteReply("done", reward=1.0, terminated=True), terminated=True)
    assert info["won"] and info["won_source"] == WON_INFERRED

"""A remote server that answers a step with a reward that is ``NaN``, ``Infinity``, a string or
a list (issue 52, defect 3): through ``agentrl/Remote-v0`` in an ``EnvPool`` the answer is an
error result with its cause and the value, the pool lives on, and a rollout stores the episode
as ``env_error`` — before, ``NaN`` reached the store, which refused the batch."""

from __future__ import annotations

import pytest
from fastapi import FastAPI, Response
from servers import thread_server

from agentrl.env import EnvPool
from agentrl.failures import failure_cause
from agentrl.rollout.request import RolloutRequest
from agentrl.rollout.scripted import run_scripted
from agentrl.types import EpisodeStatus

ROWS = [{"task_id": "go-0", "responses_create_params": {"input": [{"role": "user", "content": "Say go."}]}}]


def _standin(reward_json: str) -> FastAPI:
    """A NeMo-Gym-wire server whose every step answers ``reward_json`` verbatim (Python's json
    reads ``NaN``/``Infinity``)."""
    app = FastAPI()

    @app.get("/")
    def alive() -> dict:
        return {}

    @app.post("/reset")
    def reset() -> dict:
        return {"observation": "Say go.", "info": {"admissible_actions": ["go"], "walkthrough": ["go"]}}

    @app.post("/step")
    def step() -> Response:
        body = '{"observation": "done", "reward": %s, "terminated": true, "truncated": false, "info": {}}' % reward_json
        return Response(content=body, media_type="application/json")

    @app.post("/close")
    def close() -> dict:
        return {}

    return app


@pytest.mark.parametrize(("reward_json", "cause", "shown"), [
    ("NaN", "reward_not_finite", "nan"), ("Infinity", "reward_not_finite", "inf"),
    ("-Infinity", "reward_not_finite", "-inf"), ('"0.5"', "reward_not_numeric", "'0.5'"),
    ("[1, 2]", "reward_not_numeric", "[1, 2]"), ("true", "reward_not_numeric", "True"),
])
def test_a_hostile_reward_is_an_env_error_with_its_cause(reward_json, cause, shown):
    with thread_server(_standin(reward_json)) as url:
        kwargs = {"base_url": url, "protocol": "nemo-gym", "env_name": "hostile", "tasks": ROWS}
        with EnvPool("agentrl/Remote-v0", 1, env_kwargs=kwargs, num_workers=1) as pool:
            assert pool.reset([0], [0])[0].error is None
            res = pool.step({0: "go"})[0]
            assert failure_cause(res.error) == cause and shown in res.error, res.error
            assert pool.restarts == 0 and pool.reset([0], [1])[0].error is None  # the pool goes on
        eps = []
        run_scripted(RolloutRequest(env_id="agentrl/Remote-v0", policy="walkthrough", episodes=2, group=2,
                                    num_slots=1, num_workers=1, env_kwargs=kwargs), eps.append)
    assert [e.status for e in eps] == [EpisodeStatus.ENV_ERROR] * 2
    assert all(e.cause == cause and shown in e.error for e in eps)


def test_a_good_reward_and_a_missing_one_still_score():
    for reward_json, want in (("0.75", 0.75), ("null", 0.0), ("1", 1.0)):
        with thread_server(_standin(reward_json)) as url:
            with EnvPool("agentrl/Remote-v0", 1, env_kwargs={"base_url": url, "protocol": "nemo-gym", "tasks": ROWS},
                         num_workers=1) as pool:
                pool.reset([0], [0])
                res = pool.step({0: "go"})[0]
        assert res.error is None and res.reward == want and type(res.reward) is float

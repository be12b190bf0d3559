"""Env answers that break the contract (issue 52, defect 3): a reward that is NaN, ±inf, a
string, None, a bool or an array, a reward outside the declared range, an observation that is
bytes or over ``env.max_observation_chars`` — each becomes an error result of the pool with its
cause, the episode ``env_error`` with the value in its error text, and a training run goes on
(before: a NaN reached the store, which refused the batch, and ``agentrl train`` exited 2)."""

from __future__ import annotations

import math
from decimal import Decimal

import hostile_reward_env as hostile
import numpy as np
import pytest

from agentrl.env import EnvPool, EnvPoolError
from agentrl.env.guards import EnvAnswerError, check_observation, check_reward, declared_reward_range, reward_value
from agentrl.failures import ENV_CAUSES, failure_cause, tag_cause, with_context


@pytest.mark.parametrize(("reward", "cause"), [
    (1, None), (-0.5, None), (np.float32(0.25), None), (np.array(0.5), None), (np.array([1.0]), None),
    (float("nan"), "reward_not_finite"), (float("inf"), "reward_not_finite"), (np.float64("-inf"), "reward_not_finite"),
    ("1.0", "reward_not_numeric"), (None, "reward_not_numeric"), (True, "reward_not_numeric"),
    (np.array([1.0, 2.0]), "reward_not_numeric"), (1 + 2j, "reward_not_numeric"), (np.bool_(True), "reward_not_numeric"),
    (Decimal("0.5"), "reward_not_numeric"), (10**400, "reward_not_finite"), (np.array([[1.0]]), None),
])
def test_check_reward(reward, cause):
    got = check_reward(reward)
    assert (got and got[0]) == cause or (got is None and cause is None)
    value = reward_value(reward)
    assert (type(value) is float) == (cause is None)  # a good reward comes back as a plain float


def test_a_malformed_range_declaration_fails_the_pool_start():
    hostile.register()
    with pytest.raises(EnvPoolError, match="agentrl.reward_range.*finite with low <= high"):
        EnvPool(hostile.BAD_RANGE_ID, 1, num_workers=1)


def test_declared_range_is_closed_and_checked():
    env = hostile.HostileEnv()
    assert declared_reward_range(env) == (-1.0, 1.0)
    assert check_reward(1.0, (-1.0, 1.0)) is None and check_reward(-1.0, (-1.0, 1.0)) is None
    cause, msg = check_reward(1.5, (-1.0, 1.0))
    assert cause == "reward_out_of_range" and "1.5 is outside its declared range [-1, 1]" in msg
    env.metadata = {"agentrl.reward_range": (1.0, -1.0)}
    with pytest.raises(ValueError, match="finite with low <= high"):
        declared_reward_range(env)


def test_check_observation():
    assert check_observation("abc", 3) is None
    assert check_observation("abcd", 3)[0] == "observation_too_large"
    assert "4 characters, over env.max_observation_chars = 3" in check_observation("abcd", 3)[1]
    assert check_observation(b"abc", 3)[0] == "observation_not_text"


def test_cause_tags_round_trip():
    err = tag_cause("reward_not_finite", "step: the env's reward is nan")
    assert failure_cause(err) == "reward_not_finite"
    assert with_context("step failed: ", err) == "[reward_not_finite] step failed: step: the env's reward is nan"
    assert with_context("step failed: ", "env raised X") == "step failed: env raised X"
    assert failure_cause("[not_a_cause] x") == "" and failure_cause("") == ""
    with pytest.raises(ValueError, match="unknown failure cause 'oops'"):
        tag_cause("oops", "x")
    assert set(hostile.CAUSE.values()) == set(ENV_CAUSES)  # the env below exercises every env cause


@pytest.mark.parametrize("bad", sorted(hostile.CAUSE))
def test_every_bad_answer_is_an_error_result_with_its_cause(bad):
    hostile.register()
    with EnvPool(hostile.HOSTILE_ID, 2, env_kwargs={"bad": bad}, num_workers=1, max_observation_chars=1000) as pool:
        assert all(r.error is None for r in pool.reset([0, 1], [0, 1]).values())
        res = pool.step({0: "go", 1: "go"})
        assert failure_cause(res[0].error) == hostile.CAUSE[bad], res[0].error
        assert res[0].reward == 0.0 and res[0].obs == "" and not res[0].terminated
        assert res[1].error is None and res[1].reward == 1.0 and res[1].terminated  # the sibling slot is unaffected
        assert pool.restarts == 0
        assert "no running episode" in pool.step({0: "go"})[0].error  # the slot needs a reset, as after any env error
        assert pool.reset([0], [1])[0].error is None


def test_the_offending_value_is_named():
    hostile.register()
    with EnvPool(hostile.HOSTILE_ID, 1, env_kwargs={"bad": "str"}, num_workers=1) as pool:
        pool.reset([0], [0])
        err = pool.step({0: "go"})[0].error
    assert err == "[reward_not_numeric] step: the env's reward '1.0' (str) is not a number"


def test_the_harness_replay_checks_too():
    from agentrl.rollout.harness import replay

    hostile.register()
    with pytest.raises(EnvAnswerError) as info:
        replay(hostile.HOSTILE_ID, {"bad": "inf"}, 0, ["go"])
    assert info.value.cause == "reward_not_finite" and "inf" in str(info.value)
    task, steps = replay(hostile.HOSTILE_ID, {"bad": "inf"}, 1, ["go"])
    assert task == "h1" and [s.reward for s in steps] == [1.0]


def test_a_training_run_goes_on_and_flags_the_episodes(tiny_dir, tmp_path):
    """One iteration of ``agentrl train`` with the tiny model: group 0 plays an odd seed (ok,
    reward 1), group 1 an even seed whose first step answers NaN — stored as env_error with the
    cause and the value, never scored; the run completes its iteration."""
    from agentrl.config import config_from_dict
    from agentrl.store import TurnStore
    from agentrl.train import train

    hostile.register()
    cfg = config_from_dict({
        "run": {"name": "hostile", "out_dir": str(tmp_path), "iterations": 1, "eval_every": 0, "save_every": 1,
                "seed": 1},
        "env": {"id": hostile.HOSTILE_ID, "kwargs": {"bad": "nan"}, "max_turns": 2, "split": ""},
        "policy": {"model": str(tiny_dir), "max_tokens": 4, "action_format": "whole",
                   "action_constraint": "admissible"},
        "rollout": {"groups_per_iteration": 2, "group_size": 2, "num_workers": 1},
        "algorithm": {"estimator": "grpo"},
        "update": {"lr": 1e-2, "micro_batch": 4, "epochs": 1},
        "log": {"console": False},
    })
    result = train(cfg, resume=False)
    assert result.state.iteration == 1
    with TurnStore(result.store_path, readonly=True) as store:
        eps = store.episodes(result.run_id)
        seeds = {e.group_id: e.seed for e in eps}
    assert sorted(seeds.values()) == [1_000_003, 1_000_004]  # run.seed 1: groups play 1_000_003 + g
    for e in eps:
        if e.seed % 2:
            assert e.status.value == "ok" and e.return_ == 1.0 and e.cause == ""
        else:
            assert e.status.value == "env_error" and e.cause == "reward_not_finite" and e.return_ is None
            assert e.error == "[reward_not_finite] step failed: step: the env's reward is nan; rewards must be finite"
    assert not any(math.isnan(e.return_) for e in eps if e.return_ is not None)

"""examples/custom_env.py: the GuessNumber env keeps the TextEnv contract, as a module,
as a script and inside an EnvPool (string entry point in a spawned worker)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import gymnasium
import pytest

from agentrl.env import EnvPool, check_env, make

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def mod():
    """The example imported as module ``custom_env`` (examples/ on sys.path, as a user would)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        yield importlib.import_module("custom_env")
    finally:
        sys.path.remove(str(EXAMPLES))


def test_check_env_passes_with_check_and_default_kwargs(mod):
    small = check_env(mod.ENV_ID)  # metadata check kwargs: high=8
    assert small.walkthrough_won is True and small.episodes == 6 and small.steps > 0
    assert check_env(mod.ENV_ID, high=16, seed=5).walkthrough_won is True


def test_walkthrough_is_the_binary_search(mod):
    env = make(mod.ENV_ID)
    obs, info = env.reset(seed=0, options={"task_id": "secret11"})
    assert obs == "Guess the number between 1 and 16. The number is between 1 and 16."
    assert info["task_id"] == "secret11" and info["won"] is False
    assert info["walkthrough"] == ["guess 8", "guess 12", "guess 10", "guess 11"]
    assert info["admissible_actions"] == [f"guess {k}" for k in range(1, 17)]
    obs, reward, term, trunc, info = env.step("guess 8")
    assert (obs, reward, term, trunc) == ("Higher. The number is between 9 and 16.", 0.0, False, False)
    assert info["anchor_obs"] == "The number is between 9 and 16." and info["action_valid"] is True
    assert info["admissible_actions"] == [f"guess {k}" for k in range(9, 17)]
    obs, _, _, _, info = env.step("guess 3")  # outside the range still possible: invalid, no change
    assert obs == "Nothing happens. The number is between 9 and 16." and info["action_valid"] is False
    for action in ("guess 12", "guess 10"):
        env.step(action)
    obs, reward, term, trunc, info = env.step(" guess 11 ")
    assert (obs, reward, term, trunc, info["won"], info["admissible_actions"]) == \
        ("Correct! You won.", 1.0, True, False, True, [])
    env.close()
    env.close()


def test_turn_limit_truncates(mod):
    env = make(mod.ENV_ID, max_turns=2)
    env.reset(seed=0, options={"task_id": "secret16"})
    assert env.step("guess 1")[2:4] == (False, False)
    _, reward, term, trunc, info = env.step("guess 2")
    assert (reward, term, trunc, info["won"]) == (0.0, False, True, False)


def test_splits_are_disjoint_and_bad_kwargs_raise(mod):
    train, evals = mod.GuessNumberEnv(split="train"), mod.GuessNumberEnv(split="eval")
    assert evals.secrets == [4, 8, 12, 16] and not set(train.secrets) & set(evals.secrets)
    assert sorted(train.secrets + evals.secrets) == list(range(1, 17))
    with pytest.raises(ValueError, match="split"):
        mod.GuessNumberEnv(split="test")


def test_envpool_runs_it_from_a_string_entry_point(mod):
    pool_id = "mypkg/GuessNumberPool-v0"
    if pool_id not in gymnasium.registry:
        gymnasium.register(id=pool_id, entry_point="custom_env:GuessNumberEnv")
    with EnvPool(pool_id, 2, num_workers=1, env_kwargs={"max_turns": 3}) as pool:
        res = pool.reset([0, 1], [0, 0], options=[{"task_id": "secret5"}, None])
        assert res[0].info["walkthrough"] == ["guess 8", "guess 4", "guess 6", "guess 5"]
        assert res[1].obs == make(mod.ENV_ID).reset(seed=0)[0]  # same seed, same task in the worker
        out = pool.step({0: "guess 8", 1: "nonsense"})
        assert out[0].error is None and out[0].obs == "Lower. The number is between 1 and 7."
        assert out[1].info["action_valid"] is False


def test_script_prints_report_and_plays_walkthrough():
    proc = subprocess.run([sys.executable, str(EXAMPLES / "custom_env.py")], capture_output=True, text=True,
                          timeout=120, check=True)
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("CheckReport(env_id='mypkg/GuessNumber-v0'") and "walkthrough_won=True" in lines[0]
    assert lines[-1].endswith("reward=1.0  Correct! You won.") and all(x.startswith("> guess") for x in lines[1:])


def test_unknown_task_id_names_the_valid_ones(mod):
    env = mod.GuessNumberEnv(split="eval")
    with pytest.raises(ValueError, match=r"unknown task_id 'secret5'; expected 'secret<K>' with K in \[4, 8, 12, 16\]"):
        env.reset(seed=0, options={"task_id": "secret5"})
    assert env.reset(seed=0, options={"task_id": "secret8"})[1]["walkthrough"] == ["guess 8"]

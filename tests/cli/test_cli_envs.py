"""`agentrl envs list` and `agentrl envs play` (stdin-driven)."""

from __future__ import annotations

import io

import gymnasium
import pytest

from agentrl.cli import main
from agentrl.env.registry import list_ids, load_plugins, make, text_env_ids

TOY = "agentrl/Toy-v0"


@pytest.fixture(autouse=True)
def _toy(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    load_plugins()
    if TOY not in gymnasium.registry:
        gymnasium.register(id=TOY, entry_point="agentrl_envs.toy.env:ToyEnv")


def _play(monkeypatch, capsys, lines: str, seed: int = 3) -> tuple[int, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(lines))
    rc = main(["envs", "play", TOY, "--seed", str(seed)])
    return rc, capsys.readouterr().out


def test_envs_list_shows_ids_and_entry_points(capsys):
    assert main(["envs", "list"]) == 0
    out = capsys.readouterr().out
    for env_id in list_ids():
        assert env_id in out
        assert str(gymnasium.spec(env_id).entry_point) in out
    assert f"{len(text_env_ids())} registered env ids (ours and third-party" in out
    assert "CartPole-v1" not in out


def test_envs_list_shows_third_party_ids_in_any_namespace_and_all_adds_gymnasiums(capsys):
    ids = {"thirdparty-test/Listed-v0": "custom_env:GuessNumberEnv", "ThirdPartyNoNamespace-v0": "custom_env:GuessNumberEnv"}
    for env_id, ep in ids.items():
        gymnasium.register(id=env_id, entry_point=ep)
    try:
        assert main(["envs", "list"]) == 0
        out = capsys.readouterr().out
        assert all(env_id in out for env_id in ids) and "custom_env:GuessNumberEnv" in out
        assert "CartPole-v1" not in out and "GymV26Environment-v0" not in out  # gymnasium's own (and its shimmy stubs)
        assert main(["envs", "list", "--all"]) == 0
        out = capsys.readouterr().out
        assert all(env_id in out for env_id in ids) and "CartPole-v1" in out
        assert f"{len(list_ids(''))} registered env ids" in out
    finally:
        for env_id in ids:
            gymnasium.registry.pop(env_id, None)


def test_play_walkthrough_wins(monkeypatch, capsys):
    obs, info = make(TOY).reset(seed=3)
    plan = info["walkthrough"]
    rc, out = _play(monkeypatch, capsys, "\n".join(plan) + "\n")
    assert rc == 0
    assert obs in out and f"task {info['task_id']}" in out
    assert f"episode won after {len(plan)} turns, return 1" in out
    for i, a in enumerate(info["admissible_actions"], 1):  # the first menu is numbered
        assert f"{i:>2}. {a}" in out


def test_play_by_number_invalid_action_and_eof(monkeypatch, capsys):
    _, info = make(TOY).reset(seed=3)
    first = info["admissible_actions"][0]
    rc, out = _play(monkeypatch, capsys, "1\ndance wildly\n")  # then EOF
    assert rc == 0
    env = make(TOY)
    env.reset(seed=3)
    obs1 = env.step(first)[0]
    assert obs1 in out
    assert "(invalid action)" in out
    assert "quit after 2 turns, return 0" in out


def test_play_quit_word(monkeypatch, capsys):
    rc, out = _play(monkeypatch, capsys, "quit\nlook\n")
    assert rc == 0 and "quit after 0 turns" in out


def test_play_unknown_id(capsys):
    assert main(["envs", "play", "agentrl/Toyy-v0"]) == 2
    assert "did you mean" in capsys.readouterr().err


class _NonStrObsEnv(gymnasium.Env):
    """Broken on purpose: reset returns bytes as its observation."""

    metadata = {"render_modes": []}

    def __init__(self) -> None:
        from agentrl.env import text_spaces

        self.observation_space, self.action_space = text_spaces()

    def reset(self, *, seed=None, options=None):
        return b"start", {"anchor_obs": "start", "won": False, "task_id": "t0"}

    def step(self, action):
        return "ok", 0.0, True, False, {"anchor_obs": "ok", "won": False, "action_valid": True}


# every registered id of ours passes check_env in tests/env/test_env_check_registry.py; the CLI runs
# on a representative few (a generated game, a maze, a tool-use env) to keep this file fast
@pytest.mark.parametrize("env_id", [TOY, "agentrl/JunctionMaze-v0", "agentrl/HumanEvalTools-v0"])
def test_envs_check_passes_on_our_envs(capsys, env_id):
    from agentrl.env import MissingExtraError, check_env

    try:
        check_env(env_id, max_steps=1)
    except MissingExtraError as exc:  # optional extra not installed: say which
        pytest.skip(str(exc))
    assert main(["envs", "check", env_id, "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert f"ok {env_id}: 2 seed(s) from 0" in out and "rules checked: spaces are UnicodeText" in out


def test_envs_check_fails_naming_the_rule_on_a_broken_env(capsys):
    env_id = "agentrl-test/CliNonStrObs-v0"
    if env_id not in gymnasium.registry:
        gymnasium.register(id=env_id, entry_point=_NonStrObsEnv)
    assert main(["envs", "check", env_id]) == 1
    out = capsys.readouterr().out
    assert f"FAIL {env_id} (seed 0)" in out and "reset: obs must be str, got bytes" in out


def test_envs_check_refuses_an_unknown_id_and_a_bad_count(capsys):
    assert main(["envs", "check", "agentrl/Toyy-v0"]) == 2
    assert "did you mean 'agentrl/Toy-v0'" in capsys.readouterr().err
    assert main(["envs", "check", TOY, "--episodes", "0"]) == 2
    assert "--episodes must be >= 1, got 0" in capsys.readouterr().err


def test_envs_check_takes_constructor_keywords_and_names_a_missing_one(capsys):
    # agentrl/Remote-v0 cannot be built without base_url: a set-up error (exit 2), not a broken rule (exit 1)
    assert main(["envs", "check", "agentrl/Remote-v0"]) == 2
    err = capsys.readouterr().err
    assert "could not be built with no keywords" in err and "base_url" in err and "--env-kwarg KEY=VALUE" in err
    assert main(["envs", "check", TOY, "--seed", "-1"]) == 2
    assert "--seed must be >= 0" in capsys.readouterr().err
    assert main(["envs", "check", TOY, "--env-kwarg", "min_rooms=2", "--env-kwarg", "max_rooms=3"]) == 0
    assert f"ok {TOY}: 1 seed(s) from 0" in capsys.readouterr().out
    assert main(["envs", "check", TOY, "--env-kwarg", "min_rooms"]) == 2
    assert "is not KEY=VALUE" in capsys.readouterr().err


class _RaisingResetEnv(gymnasium.Env):
    """reset raises: a contract failure (exit 1) named as the env raising, never a set-up error."""

    metadata = {"render_modes": []}

    def __init__(self) -> None:
        from agentrl.env import text_spaces

        self.observation_space, self.action_space = text_spaces()

    def reset(self, *, seed=None, options=None):
        return None + 1  # a TypeError inside the env's own code


def _failing_constructor(**kwargs):
    raise RuntimeError("module import boom")


def test_envs_check_tells_a_raising_env_from_one_it_cannot_build(capsys):
    raising, unbuildable = "agentrl-test/CliRaisingReset-v0", "agentrl-test/CliUnbuildable-v0"
    if raising not in gymnasium.registry:
        gymnasium.register(id=raising, entry_point=_RaisingResetEnv)
        gymnasium.register(id=unbuildable, entry_point=_failing_constructor)
    assert main(["envs", "check", raising]) == 1
    out = capsys.readouterr().out
    assert f"FAIL {raising} (seed 0)" in out and "the env raised TypeError" in out and "--env-kwarg" not in out
    assert main(["envs", "check", unbuildable]) == 2
    err = capsys.readouterr().err
    assert f"{unbuildable} could not be built with no keywords: RuntimeError: module import boom" in err

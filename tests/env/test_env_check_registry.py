"""check_env over every registered id, check_env's own rules, id discovery and errors."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

import envcheck_bad_envs as bad
import pytest

from agentrl.env.check import GARBAGE_ACTIONS
from agentrl.env import EnvCheckError, MissingExtraError, check_env, check_kwargs, list_ids, local_ids, make


@pytest.mark.parametrize("env_id", local_ids())  # Remote-v0 needs a server: tests/envs_remote
def test_check_env_on_every_registered_id(env_id):
    try:
        report = check_env(env_id)
    except MissingExtraError as exc:  # optional extra not installed: say which
        pytest.skip(str(exc))
    assert report.env_id == env_id
    assert report.episodes >= 5 and report.steps >= len(GARBAGE_ACTIONS)


def test_list_ids_sees_our_ids_in_a_fresh_process(tmp_path):
    # discovery goes through the `gymnasium.envs` entry-point group, not the cwd
    eps = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="gymnasium.envs")}
    assert eps.get("agentrl") == "agentrl_envs"
    code = "import json; from agentrl.env import list_ids; print(json.dumps(list_ids()))"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    ids = json.loads(out.stdout)
    for env_id in ("agentrl/Toy-v0", "agentrl/TextWorld-v0", "agentrl/TextWorld-CU1-v0", "agentrl/TextWorld-CC3-v0"):
        assert env_id in ids


def test_unknown_id_lists_closest_ids():
    with pytest.raises(KeyError) as ei:
        make("agentrl/Toyy-v0")
    msg = str(ei.value)
    assert "'agentrl/Toyy-v0'" in msg and "did you mean 'agentrl/Toy-v0'" in msg
    assert "agentrl/TextWorld-CU1-v0" in msg  # the known ids are listed


def test_check_kwargs_come_from_class_metadata():
    assert check_kwargs("agentrl/TextWorld-CU1-v0") == {"n_tasks": 2}
    assert check_kwargs("agentrl/Toy-v0") == {}


def test_check_env_accepts_a_good_env():
    bad.register_all()
    report = check_env("agentrl-test/GoodEnv-v0")
    assert report.walkthrough_won is True
    # walkthrough, random, twin replay, replay, garbage = 5 resets; the 8 garbage actions hit
    # GoodEnv's 3-turn limit after actions 3 and 6, each followed by a reset: 7 in all
    assert report.episodes == 7


@pytest.mark.parametrize("name", sorted(bad.BAD))
def test_check_env_rejects_each_broken_rule(name):
    bad.register_all()
    with pytest.raises(EnvCheckError) as ei:
        check_env(f"agentrl-test/{name}-v0")
    assert bad.BAD[name] in str(ei.value)
    assert f"agentrl-test/{name}-v0" in str(ei.value)

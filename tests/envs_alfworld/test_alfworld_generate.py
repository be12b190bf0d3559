"""Generated ALFWorld games: every task type is solvable and plays through ALFWorldEnv."""

from __future__ import annotations

import json

import pytest

from agentrl.env import INFO_VALID, INFO_WALKTHROUGH, make
from agentrl_envs.alfworld import data, expert
from agentrl_envs.alfworld.generate import check_game, generate
from agentrl_envs.alfworld.panels import alfworld_panel
from agentrl_envs.alfworld.scene import sample_task


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    import os

    root = tmp_path_factory.mktemp("alfgen")
    old = os.environ.get("AGENTRL_CACHE")
    os.environ["AGENTRL_CACHE"] = str(root / "cache")
    games = generate(6, seed=11, out=root / "games")
    yield root, games
    if old is None:
        os.environ.pop("AGENTRL_CACHE")
    else:
        os.environ["AGENTRL_CACHE"] = old


def test_every_task_type_generated_and_won_through_env(generated):
    root, games = generated
    assert [g.task_type for g in games] == list(data.TASK_TYPES)
    env = make("agentrl/ALFWorld-v0", split="train", generated_dir=root / "games")
    ids = [t for t in env.unwrapped.task_ids if t.startswith("generated/")]
    assert len(ids) == 6 and len(env.unwrapped.task_ids) == 206
    for task_id in ids:
        obs, info = env.reset(options={"task_id": task_id})
        assert "Your task is to: " in obs
        plan = info[INFO_WALKTHROUGH]  # written to the cache by the generator
        for i, cmd in enumerate(plan):
            _, r, term, trunc, sinfo = env.step(cmd)
            assert sinfo[INFO_VALID] and term == (i == len(plan) - 1) and not trunc
        assert r == 1.0, task_id


def test_generated_files_layout_and_metadata(generated):
    root, games = generated
    for g in games:
        game = json.loads((g.path / "game.tw-pddl").read_text())
        traj = json.loads((g.path / "traj_data.json").read_text())
        assert game["solvable"] is True and set(game) == {"pddl_domain", "grammar", "pddl_problem", "solvable"}
        assert traj["task_type"] == g.task_type == g.path.parent.name.split("-")[0]
        assert data.goal_text(game["grammar"]) == traj["turk_annotations"]["anns"][0]["task_desc"]
        assert expert.cached_walkthrough(game) == list(g.walkthrough)
        assert data.load_game(g.path / "game.tw-pddl", grammar="0.4.2") == game  # already 0.4.2 wording


def test_generation_is_deterministic_through_cli(tmp_path, generated, capsys):
    from agentrl.cli import main

    _, games = generated
    assert main(["generate", "alfworld", "--n", "1", "--seed", "11", "--out", str(tmp_path)]) == 0
    again = tmp_path / games[0].path.relative_to(games[0].path.parents[1])
    assert (again / "game.tw-pddl").read_bytes() == (games[0].path / "game.tw-pddl").read_bytes()
    assert str(again) in capsys.readouterr().out
    assert main(["generate", "alfworld", "--n", "1", "--out", str(tmp_path), "--task-types", "juggle"]) == 2


def test_generated_games_join_train_panel_only(generated):
    root, _ = generated
    train = alfworld_panel("train", generated_dir=root / "games")
    assert len(train) == 206
    assert len(alfworld_panel("eval_seen", generated_dir=root / "games")) == 140


def test_check_game_rejects_unwinnable_and_bad_args(tmp_path):
    import random

    from agentrl_envs.alfworld import pddl_writer

    task = sample_task("pick_and_place_simple", random.Random(0))
    task.objects = {k: v for k, v in task.objects.items() if v[0] != task.obj}  # remove the target
    assert check_game(pddl_writer.game_dict(task, "plan_x")) is None
    with pytest.raises(ValueError, match="task type"):
        generate(1, 0, tmp_path, task_types=("pick_and_juggle",))
    with pytest.raises(ValueError, match="n must be"):
        generate(0, 0, tmp_path)

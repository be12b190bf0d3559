"""ALFWorld data: split listing, task ids, P9 errors, grammar conversion, missing extra."""

from __future__ import annotations

import json
import sys

import pytest

from agentrl.env import DataMissingError, MissingExtraError, make
from agentrl_envs.alfworld import data


def test_split_sizes_and_task_ids():
    sizes = {s: len(data.list_games(s)) for s in data.SPLITS}
    assert sizes == {"train": 200, "eval_seen": 140, "eval_unseen": 134}
    g = data.list_games("eval_unseen")[0]
    assert g.task_id == "valid_unseen/look_at_obj_in_light-AlarmClock-None-DeskLamp-308/trial_T20190908_222917_366542"
    assert g.task_type == "look_at_obj_in_light" and g.path.name == "game.tw-pddl"
    assert {x.task_type for x in data.list_games("eval_seen")} == set(data.TASK_TYPES)


@pytest.mark.parametrize("how", ["kwarg", "envvar"])
def test_p9_empty_dir_raises_actionable_error(tmp_path, monkeypatch, how):
    empty = tmp_path / "empty"
    empty.mkdir()
    kwargs = {"data_dir": str(empty)} if how == "kwarg" else {}
    if how == "envvar":
        monkeypatch.setenv(data.ENV_VAR, str(empty))
    with pytest.raises(DataMissingError) as err:
        make("agentrl/ALFWorld-v0", split="eval_unseen", **kwargs)
    msg = str(err.value)
    assert str(empty) in msg and "no ALFWorld games" in msg
    assert "../shared/data/alfworld" in msg and "alfworld-download" in msg and data.ENV_VAR in msg
    assert "0 games" not in msg


def test_p9_missing_dir_and_empty_split(tmp_path):
    with pytest.raises(DataMissingError, match="does not exist"):
        data.list_games("train", data_dir=tmp_path / "nope")
    # a data dir with games but without the requested split folder
    split = tmp_path / "json_2.1.1" / "valid_seen" / "pick_and_place_simple-Mug-None-Desk-1" / "trial_x"
    split.mkdir(parents=True)
    (split / "game.tw-pddl").write_text(json.dumps({"solvable": True}))
    (split / "traj_data.json").write_text("{}")
    assert len(data.list_games("eval_seen", data_dir=tmp_path)) == 1
    with pytest.raises(DataMissingError, match="valid_unseen"):
        data.list_games("eval_unseen", data_dir=tmp_path)


def test_unknown_split_and_grammar():
    with pytest.raises(ValueError, match="eval_unseen"):
        data.list_games("test")
    with pytest.raises(ValueError, match="0.4.2"):
        data.load_game(data.list_games("eval_unseen")[0].path, grammar="0.3")


def test_missing_extra_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "textworld", None)
    from agentrl_envs.alfworld.env import ALFWorldEnv

    with pytest.raises(MissingExtraError, match=r"agentrl\[alfworld\]"):
        ALFWorldEnv(split="eval_unseen")


def test_grammar_conversion_keeps_problem_and_goal():
    path = data.list_games("eval_unseen")[0].path
    native = data.load_game(path)
    new = data.load_game(path, grammar="0.4.2")
    domain, template = data.wheel_logic()
    assert new["pddl_problem"] == native["pddl_problem"] and new["pddl_domain"] == domain
    assert native["pddl_domain"] != domain
    assert data.goal_text(native["grammar"]) == data.goal_text(new["grammar"]) == "examine the alarmclock with the desklamp"
    assert new["grammar"] == template.replace("UNKNOWN GOAL", "examine the alarmclock with the desklamp")
    # converting an already-0.4.2 grammar is a fixed point
    assert data.load_game(path, grammar="0.4.2") == new


def test_missing_generated_dir_is_actionable(tmp_path):
    with pytest.raises(DataMissingError, match="agentrl generate alfworld"):
        data.list_games("train", generated_dir=tmp_path / "nope")
    # eval splits ignore generated games entirely
    assert len(data.list_games("eval_seen", generated_dir=tmp_path / "nope")) == 140

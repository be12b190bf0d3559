"""agentrl/Toy-v0: hand-played episodes, repeated anchors, invalid actions, limits, seeds."""

from __future__ import annotations

import pytest

from agentrl.env import make
from agentrl_envs.toy.env import NOTHING, ToyTask

TASK = {"task_id": "rooms4-key2-door0"}


def test_walkthrough_is_the_shortest_plan():
    assert ToyTask.parse("rooms4-key2-door0").walkthrough() == [
        "go east", "go east", "take key", "go west", "go west", "open door"]
    assert ToyTask.parse("rooms5-key1-door3").walkthrough() == ["go east", "take key", "go east", "go east", "open door"]


def test_hand_played_episode():
    env = make("agentrl/Toy-v0")
    obs, info = env.reset(seed=0, options=TASK)
    assert obs == "You are in room 1 of 4. There is a locked door in the north wall."
    assert info["admissible_actions"] == ["go east", "open door", "inventory", "look"]
    assert info["task_id"] == "rooms4-key2-door0" and info["won"] is False
    steps = [env.step(a) for a in ["open door", "go east", "go east", "take key", "inventory"]]
    assert [s[0] for s in steps] == [
        "The door is locked.",
        "You are in room 2 of 4.",
        "You are in room 3 of 4. A key lies on the floor.",
        "You take the key.",
        "You are carrying: a key.",
    ]
    assert all(s[4]["action_valid"] and s[1] == 0.0 and not s[2] for s in steps)
    env.step("go west"), env.step("go west")
    obs, reward, term, trunc, info = env.step("open door")
    assert (reward, term, trunc, info["won"]) == (1.0, True, False, True)


def test_states_repeat_so_anchor_groups_form():
    env = make("agentrl/Toy-v0")
    _, info0 = env.reset(seed=0, options=TASK)
    anchors = [env.step(a)[4]["anchor_obs"] for a in ["go east", "go west", "go east", "look"]]
    assert anchors[1] == info0["anchor_obs"]
    assert anchors[0] == anchors[2] == anchors[3] == "You are in room 2 of 4."


def test_invalid_actions_are_feedback_not_exceptions():
    env = make("agentrl/Toy-v0")
    env.reset(seed=0, options=TASK)
    for bad in ["dance", "take key", "go west", "", "GO EAST"]:  # take key: not here; go west: wall
        obs, reward, term, trunc, info = env.step(bad)
        assert (obs, reward, info["action_valid"], info["anchor_obs"]) == (NOTHING, 0.0, False, NOTHING)
    assert env.step(" go east ")[4]["action_valid"] is True  # surrounding spaces are stripped


def test_turn_limit_truncates():
    env = make("agentrl/Toy-v0", max_turns=3)
    env.reset(seed=0, options=TASK)
    flags = [env.step("look")[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]


def test_seed_selects_task_deterministically():
    env = make("agentrl/Toy-v0")
    ids = [env.reset(seed=s)[1]["task_id"] for s in range(20)]
    assert ids == [make("agentrl/Toy-v0").reset(seed=s)[1]["task_id"] for s in range(20)]
    assert len(set(ids)) > 5
    for tid in ids:
        t = ToyTask.parse(tid)
        assert 3 <= t.n_rooms <= 5 and t.key_room != t.door_room


@pytest.mark.parametrize("bad", ["rooms4-key0-door1", "rooms4-key2-door2", "rooms-1", "rooms3-key5-door0"])
def test_bad_task_id_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="toy task"):
        ToyTask.parse(bad)

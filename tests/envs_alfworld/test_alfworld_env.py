"""ALFWorldEnv: the TextEnv contract on real kept games, both grammars, walkthrough wins."""

from __future__ import annotations

import pytest

from agentrl.env import INFO_ADMISSIBLE, INFO_ANCHOR, INFO_TASK, INFO_VALID, INFO_WALKTHROUGH, INFO_WON, make
from agentrl.env.spaces import UnicodeText
from agentrl_envs.alfworld import data, expert

LAMP = "valid_unseen/look_at_obj_in_light-AlarmClock-None-DeskLamp-308/trial_T20190908_222917_366542"


@pytest.fixture(scope="module")
def env():
    e = make("agentrl/ALFWorld-v0", split="eval_unseen", max_turns=5)
    yield e
    e.close()


def test_reset_contract(env):
    obs, info = env.reset(options={"task_id": LAMP})
    assert isinstance(env.unwrapped.observation_space, UnicodeText)
    assert obs.startswith("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room.")
    assert obs.endswith("\n\nYour task is to: examine the alarmclock with the desklamp.")
    assert info[INFO_ANCHOR] == obs and info[INFO_TASK] == LAMP and info[INFO_WON] is False
    assert info["instruction"] == "examine the alarmclock with the desklamp"
    assert "go to desk 2" in info[INFO_ADMISSIBLE] and "inventory" in info[INFO_ADMISSIBLE]
    assert info[INFO_ADMISSIBLE] == sorted(info[INFO_ADMISSIBLE])


def test_step_valid_invalid_and_anchor(env):
    env.reset(options={"task_id": LAMP})
    obs, r, term, trunc, info = env.step("go to desk 2")
    assert obs == "You arrive at loc 24. On the desk 2, you see a alarmclock 1."
    assert info[INFO_ANCHOR] == obs and info[INFO_VALID] is True and (r, term, trunc) == (0.0, False, False)
    before = info[INFO_ADMISSIBLE]
    obs, r, term, trunc, info = env.step("fly to the moon")
    assert obs == info[INFO_ANCHOR] == "Nothing happens."
    assert info[INFO_VALID] is False and info[INFO_ADMISSIBLE] == before and r == 0.0
    obs, *_ = env.step("  take alarmclock 1 from desk 2 ")  # surrounding spaces are stripped
    assert obs == "You pick up the alarmclock 1 from the desk 2."


def test_win_terminates_with_reward_one(env):
    env.reset(options={"task_id": LAMP})
    for cmd in ["go to desk 2", "take alarmclock 1 from desk 2", "go to desk 1"]:
        assert env.step(cmd)[1:4] == (0.0, False, False)
    obs, r, term, trunc, info = env.step("use desklamp 1")
    assert (obs, r, term, trunc, info[INFO_WON]) == ("You turn on the desklamp 1.", 1.0, True, False, True)
    with pytest.raises(RuntimeError, match="reset"):
        env.step("look")


def test_truncation_at_max_turns(env):
    env.reset(options={"task_id": LAMP})
    flags = [env.step("look")[2:4] for _ in range(5)]
    assert flags == [(False, False)] * 4 + [(False, True)]


def test_seeded_task_choice_and_bad_task_id(env):
    from gymnasium.utils.seeding import np_random

    ids = [env.reset(seed=3)[1][INFO_TASK] for _ in range(2)]
    want = env.unwrapped.task_ids[int(np_random(3)[0].integers(134))]
    assert ids == [want, want]
    with pytest.raises(KeyError, match="did you mean"):
        env.reset(options={"task_id": LAMP[:-1]})
    with pytest.raises(KeyError):  # an eval task is not in the train split
        make("agentrl/ALFWorld-v0", split="train").reset(options={"task_id": LAMP})


def test_grammar_042_wording():
    e = make("agentrl/ALFWorld-v0", split="eval_unseen", grammar="0.4.2")
    obs, info = e.reset(options={"task_id": LAMP})
    assert obs.endswith("Your task is to: examine the alarmclock with the desklamp.")
    assert "help" in info[INFO_ADMISSIBLE]
    assert e.step("go to desk 2")[0] == "You arrive at desk 2. On the desk 2, you see a alarmclock 1."
    e.close()
    e.close()  # idempotent


def _play(env, task_id: str) -> tuple[bool, list[str]]:
    obs, info = env.reset(options={"task_id": task_id})
    plan = info[INFO_WALKTHROUGH]
    out = (False, False)
    for cmd in plan:
        _, r, term, trunc, step_info = env.step(cmd)
        assert step_info[INFO_VALID], (task_id, cmd)
        out = (term and r == 1.0, trunc)
    return out[0], plan


SAMPLE = data.list_games("eval_unseen")[::14][:10]


def test_walkthrough_wins_sample_and_is_cached(fresh_cache):
    env = make("agentrl/ALFWorld-v0", split="eval_unseen", expert=True)
    cold = make("agentrl/ALFWorld-v0", split="eval_unseen")  # expert=False: only the cache
    assert len(SAMPLE) == 10 and len({g.task_type for g in SAMPLE}) == 6
    assert INFO_WALKTHROUGH not in cold.reset(options={"task_id": SAMPLE[0].task_id})[1]
    for g in SAMPLE:
        won, plan = _play(env, g.task_id)
        assert won, g.task_id
        assert expert.cached_walkthrough(data.load_game(g.path)) == plan
    assert len(list((fresh_cache / "alfworld" / "walkthroughs").glob("*.json"))) == 10
    assert cold.reset(options={"task_id": SAMPLE[0].task_id})[1][INFO_WALKTHROUGH] == expert.cached_walkthrough(
        data.load_game(SAMPLE[0].path))


@pytest.mark.slow
@pytest.mark.sweep
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("grammar", ["native", "0.4.2"])
def test_walkthrough_wins_all_eval_unseen(grammar):
    """134/134 eval_unseen games won by the planner walkthrough (~3.5 s planner per game,
    once; later runs read the walkthrough cache)."""
    env = make("agentrl/ALFWorld-v0", split="eval_unseen", expert=True, grammar=grammar)
    ids = env.unwrapped.task_ids
    lost = [t for t in ids if not _play(env, t)[0]]
    assert len(ids) == 134 and lost == []

"""TextWorld envs: feedback cleaning, game specs and cache, per-step reward, validity rules."""

from __future__ import annotations

import importlib.util
import sys
import threading
from pathlib import Path

import pytest

from agentrl.env import EnvPool, MissingExtraError, make
from agentrl_envs.textworld import games
from agentrl_envs.textworld.env import REJECTED_FEEDBACK, TextWorldEnv, clean_feedback

needs_tw = pytest.mark.skipif(importlib.util.find_spec("textworld") is None,
                              reason="textworld extra not installed (pip install 'agentrl[textworld]')")

BANNER = (
    "\n\n\n\n                    ________  ________  __    __  ________        \n"
    "                   |        \\|        \\|  \\  |  \\|        \\       \n"
    "                    \\$$$$$$$$| $$$$$$$$| $$  | $$ \\$$$$$$$$       \n"
    "                      | $$   | $$  \\     >$$  $$    | $$          \n\n"
)
STATUS = "\n\n>" + " " * 64 + "-= Studio =-0/1"


def test_clean_feedback_strips_banner_and_status_line_only():
    room = "-= Studio =-\nYou are in a studio. A normal one.\n\nThere is an exit to the north."
    text = BANNER + "Welcome to TextWorld! Close the box.\n\n" + room + STATUS
    assert clean_feedback(text) == "Welcome to TextWorld! Close the box.\n\n" + room
    assert clean_feedback("\nThat's not a verb I recognise." + STATUS) == "That's not a verb I recognise."
    assert clean_feedback("no prompt at all") == "no prompt at all"
    assert clean_feedback("a > b\n>  -= Den =-3/4") == "a > b"  # only the last '\n>' cuts


def test_game_spec_key_and_tw_make_args():
    spec = games.GameSpec.make("tw-cooking", {"recipe": 2, "open": True, "cut": False, "go": 6}, 5)
    assert spec.key == "tw-cooking/go=6,open=True,recipe=2/seed=5"
    assert spec.tw_make_args(Path("/o/game.z8")) == [
        "tw-cooking", "--go", "6", "--open", "--recipe", "2", "--seed", "5", "--output", "/o/game.z8", "--silent", "-f"]
    assert games.GameSpec.make("custom", {"world_size": 2}, 1) == games.GameSpec.make("custom", {"world-size": 2}, 1)
    with pytest.raises(ValueError, match="unknown TextWorld family 'tw-zork'"):
        games.GameSpec.make("tw-zork", {}, 0)


def test_train_and_eval_seed_ranges_are_disjoint_and_fixed():
    assert games.task_seed("train", 0) == 0 and games.task_seed("train", 999_999) == 999_999
    assert games.task_seed("eval", 0) == 1_000_000
    with pytest.raises(ValueError, match="unknown split 'test'"):
        games.task_seed("test", 0)
    with pytest.raises(ValueError, match="task index"):
        games.task_seed("train", 1_000_000)


def test_missing_textworld_is_a_missing_extra_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "textworld", None)
    with pytest.raises(MissingExtraError, match=r"agentrl\[textworld\]"):
        TextWorldEnv()


FAKE_TW_MAKE = """#!{python}
import sys, time
from pathlib import Path
out = Path(sys.argv[sys.argv.index("--output") + 1])
with open({log!r}, "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\\n")
time.sleep(0.3)
for ext in ("z8", "json", "ni"):
    out.with_suffix("." + ext).write_text("fake")
"""


def _concurrent_ensure(spec, root, n=3):
    paths = []
    threads = [threading.Thread(target=lambda: paths.append(games.ensure_game(spec, root))) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return paths


def test_parallel_requests_generate_a_game_once_under_the_lock(tmp_path, monkeypatch):
    log, exe = tmp_path / "calls.log", tmp_path / "tw-make"
    exe.write_text(FAKE_TW_MAKE.format(python=sys.executable, log=str(log)))
    exe.chmod(0o755)
    monkeypatch.setattr(games, "_tw_make", lambda: str(exe))
    monkeypatch.setenv("AGENTRL_CACHE", str(tmp_path / "cache"))
    spec = games.GameSpec.make("tw-coin_collector", {"level": 1}, 7)
    paths = _concurrent_ensure(spec, None)
    want = tmp_path / "cache/textworld/tw-coin_collector/level=1/seed=7/game.z8"
    assert paths == [want] * 3
    (call,) = log.read_text().splitlines()  # one generation for three requests
    head, out = call.split(" --output ")
    assert head == "tw-coin_collector --level 1 --seed 7" and out.endswith("/game.z8 --silent -f")
    assert sorted(p.name for p in want.parent.iterdir()) == ["game.json", "game.ni", "game.z8"]
    assert [p.name for p in want.parent.parent.iterdir() if p.name.startswith(".gen-")] == []
    games.ensure_game(spec)  # cached: no new call
    assert len(log.read_text().splitlines()) == 1


def test_failed_generation_names_the_game_and_leaves_no_partial_dir(tmp_path, monkeypatch):
    exe = tmp_path / "tw-make"
    exe.write_text(f"#!{sys.executable}\nimport sys\nsys.stderr.write('no such level')\nsys.exit(2)\n")
    exe.chmod(0o755)
    monkeypatch.setattr(games, "_tw_make", lambda: str(exe))
    spec = games.GameSpec.make("tw-coin_collector", {"level": 999}, 1)
    with pytest.raises(RuntimeError, match=r"tw-make failed for tw-coin_collector/level=999/seed=1 \(exit 2\): no such level"):
        games.ensure_game(spec, tmp_path)
    assert not (tmp_path / spec.key).exists()
    assert [p.name for p in (tmp_path / spec.key).parent.iterdir() if not p.name.endswith(".lock")] == []


@needs_tw
@pytest.mark.slow
def test_real_tw_make_generates_a_playable_game_once(tmp_path):
    spec = games.GameSpec.make("tw-coin_collector", {"level": 1}, 7)
    paths = _concurrent_ensure(spec, tmp_path)
    assert paths == [tmp_path / "tw-coin_collector/level=1/seed=7/game.z8"] * 3
    assert sorted(p.name for p in paths[0].parent.iterdir()) == ["game.json", "game.ni", "game.z8"]


@needs_tw
def test_reward_is_the_per_step_difference_of_the_cumulative_score():
    env = TextWorldEnv(family="tw-simple", params={"rewards": "dense", "goal": "detailed"}, n_tasks=1)
    obs, info = env.reset(seed=0)
    rewards, scores = [], []
    for a in info["walkthrough"]:
        _, r, term, trunc, step_info = env.step(a)
        rewards.append(r)
        scores.append(step_info["score"])
    assert step_info["won"] and term and not trunc
    assert sum(r > 0 for r in rewards) >= 2  # dense: several scoring steps
    assert sum(rewards) == info["max_score"] == scores[-1]
    assert rewards == [s - p for s, p in zip(scores, [0] + scores[:-1])]


@needs_tw
def test_cu1_invalid_and_rejected_actions_then_walkthrough_wins():
    env = make("agentrl/TextWorld-CU1-v0", n_tasks=2)
    obs, info = env.reset(seed=0, options={"task_index": 0})
    assert info["task_id"] == "custom/nb-objects=3,quest-length=1,world-size=2/seed=0"
    assert obs == info["anchor_obs"] and "$$" not in obs and "-= " in obs and not obs.endswith("0/1")
    _, r, term, trunc, step = env.step("dance wildly")  # sent to the game, not admissible
    assert step["action_valid"] is False and step["anchor_obs"] == "That's not a verb I recognise."
    _, _, _, _, step2 = env.step("look\ngo north")  # two commands: never sent
    assert step2["anchor_obs"] == REJECTED_FEEDBACK and step2["action_valid"] is False
    assert step2["admissible_actions"] == info["admissible_actions"]
    assert env.step("  LOOK ")[4]["action_valid"] is True  # case and spaces do not matter
    for a in info["walkthrough"]:
        _, r, term, trunc, step = env.step(a)
    assert step["won"] and term and r == 1.0
    again = env.reset(options={"task_id": info["task_id"]})  # task_id selects the same game
    assert again == (obs, info)
    with pytest.raises(ValueError, match="is not a task of this env"):
        env.reset(options={"task_id": "tw-coin_collector/level=3/seed=0"})


@needs_tw
def test_cu1_truncates_after_eight_turns():
    env = make("agentrl/TextWorld-CU1-v0", n_tasks=2)
    env.reset(seed=0, options={"task_index": 0})
    flags = [env.step("inventory")[2:4] for _ in range(8)]
    assert flags == [(False, False)] * 7 + [(False, True)]


@needs_tw
def test_eval_split_uses_its_own_games():
    train, ev = TextWorldEnv(split="train", n_tasks=40), TextWorldEnv(split="eval", n_tasks=40)
    assert {train.game_spec(i).seed for i in range(40)}.isdisjoint({ev.game_spec(i).seed for i in range(40)})


@needs_tw
def test_envpool_plays_textworld_like_in_process():
    with EnvPool("agentrl/TextWorld-CU1-v0", 2, env_kwargs={"n_tasks": 2}, num_workers=2) as pool:
        got = pool.reset([0, 1], [0, 0], options=[{"task_index": 0}, {"task_index": 1}])
        walks = {s: r.info["walkthrough"] for s, r in got.items()}
        last = {}
        for t in range(max(map(len, walks.values()))):
            last.update(pool.step({s: w[t] for s, w in walks.items() if t < len(w)}))
    assert all(r.error is None and r.info["won"] and r.terminated for r in last.values())
    env = make("agentrl/TextWorld-CU1-v0", n_tasks=2)
    assert env.reset(seed=0, options={"task_index": 1})[0] == got[1].obs


@needs_tw
def test_every_admissible_command_is_valid_whatever_its_case():
    """Regression: commands with capitals (e.g. 'examine type K chest') were compared
    lower-cased against an un-normalised admissible set and flagged invalid."""
    env = make("agentrl/TextWorld-CU1-v0", n_tasks=4)
    checked, capitals = 0, 0
    for task in range(4):  # train task 3 has 'examine type K chest' and friends
        _, info = env.reset(seed=0, options={"task_index": task})
        for action in info["admissible_actions"]:
            env.reset(seed=0, options={"task_index": task})
            assert env.step(action)[4]["action_valid"] is True, action
            checked, capitals = checked + 1, capitals + (action != action.lower())
    assert checked >= 8 and capitals >= 1

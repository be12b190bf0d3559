"""External harnesses as episodes: examples/harness_agent.py (plain openai SDK) plays
agentrl/Toy-v0 through the proxy; the verifier replays its actions for the reward;
deadlines, crashes and bad logs are flagged, never scored 0."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from agentrl.env import make
from agentrl.llm.scripted import ScriptedEngine
from agentrl.rollout.harness import HarnessSpec, collect_harness_episodes, run_harness
from agentrl.types import EpisodeStatus

ROOT = Path(__file__).resolve().parents[2]
AGENT = ("{python}", str(ROOT / "examples" / "harness_agent.py"))


def _walkthrough(seed: int) -> list[str]:
    env = make("agentrl/Toy-v0")
    _, info = env.reset(seed=seed)
    env.close()
    return info["walkthrough"]


def test_harness_plays_walkthrough_and_verifier_scores(serve, renderer, reply_ids):
    plan = _walkthrough(5)
    engine = ScriptedEngine([reply_ids(f"<action>{a}</action>") for a in plan], eos_token_id=renderer.eos_token_id)
    spec = HarnessSpec(command=AGENT + ("--max-turns", "12"), env_id="agentrl/Toy-v0", timeout_s=60)
    with serve(engine) as proxy:
        ep = run_harness(proxy, spec, seed=5, group_id=1, episode_id=9)
    assert ep.status == EpisodeStatus.OK, ep.error
    assert (ep.episode_id, ep.group_id, ep.seed, ep.env_id) == (9, 1, 5, "agentrl/Toy-v0")
    assert ep.task_id.startswith("rooms")
    assert [t.action for t in ep.turns] == plan and all(t.action_valid for t in ep.turns)
    assert [t.reward for t in ep.turns] == [0.0] * (len(plan) - 1) + [1.0]
    assert ep.turns[-1].terminated and ep.success and ep.return_ == 1.0
    assert ep.turns[0].anchor_obs == "You are in room 1 of " + ep.task_id[5] + "."
    assert all(t.next_anchor_obs == u.anchor_obs for t, u in zip(ep.turns, ep.turns[1:]))
    assert all(t.info["segment"] == 0 and t.info["reward_alignment"] == "turn" for t in ep.turns)
    assert [t.completion_ids.tolist() for t in ep.turns] == [reply_ids(f"<action>{a}</action>") for a in plan]


def test_harness_that_stops_early_is_cut_not_won(serve, renderer, reply_ids):
    engine = ScriptedEngine([reply_ids("<action>dance</action>")], eos_token_id=renderer.eos_token_id)
    spec = HarnessSpec(command=AGENT + ("--max-turns", "3", "--stream"), env_id="agentrl/Toy-v0", timeout_s=60)
    with serve(engine) as proxy:
        ep = run_harness(proxy, spec, seed=0)
    assert ep.status == EpisodeStatus.OK and len(ep.turns) == 3
    assert [t.action_valid for t in ep.turns] == [False] * 3 and ep.return_ == 0.0
    assert ep.turns[-1].truncated and ep.turns[-1].info["cut"] == "harness_ended" and not ep.success
    assert all(t.info["stream"] for t in ep.turns)


CALL = ("from openai import OpenAI; OpenAI(max_retries=0).chat.completions.create(model='p', "
        "messages=[{'role': 'user', 'content': 'hi'}]); ")


@pytest.mark.parametrize("code, status, cause, words", [
    (CALL + "import time; time.sleep(60)", EpisodeStatus.TIMEOUT, "harness_timeout", "deadline"),
    (CALL + "import sys; sys.stderr.write('boom'); sys.exit(3)", EpisodeStatus.ABORTED, "harness_exit",
     "code 3: boom"),
    (CALL + "import os; open(os.environ['AGENTRL_ACTION_LOG'], 'w').write('go east')", EpisodeStatus.ABORTED,
     "bad_action_log", "bad action log"),
])
def test_failed_harness_is_flagged(serve, renderer, reply_ids, code, status, cause, words):
    engine = ScriptedEngine([reply_ids("look")], eos_token_id=renderer.eos_token_id)
    # The crashing harnesses exit at once but first import openai (seconds on a loaded machine, e.g. beside
    # another pytest-xdist worker): their deadline leaves room for that, the hanging one's stays short.
    timeout_s = 6 if status == EpisodeStatus.TIMEOUT else 25
    spec = HarnessSpec(command=(sys.executable, "-c", code), env_id="agentrl/Toy-v0", timeout_s=timeout_s)
    with serve(engine) as proxy:
        t0 = time.monotonic()
        ep = run_harness(proxy, spec, seed=0)
    assert ep.status == status and ep.cause == cause and words in ep.error and time.monotonic() - t0 < 30
    assert len(ep.turns) == 1 and ep.turns[0].reward is None and ep.return_ is None  # unscored, not 0 (P5)


def test_harness_environment_contract(serve, renderer, reply_ids, tmp_path):
    out = tmp_path / "env.txt"
    code = ("import os; keys = ['OPENAI_BASE_URL', 'OPENAI_API_KEY', 'AGENTRL_ENV_ID', 'AGENTRL_SEED', "
            f"'AGENTRL_ENV_KWARGS']; open({str(out)!r}, 'w').write('|'.join(os.environ[k] for k in keys))")
    spec = HarnessSpec(command=(sys.executable, "-c", code), env_id="agentrl/Toy-v0", env_kwargs={"max_turns": 4})
    with serve(ScriptedEngine([[renderer.eos_token_id]], eos_token_id=renderer.eos_token_id)) as proxy:
        ep = run_harness(proxy, spec, seed=11)
        key = proxy.registry.get(ep.episode_id).key
    url, api_key, env_id, seed, kwargs = out.read_text().split("|")
    assert url == f"{proxy.url}/e/{key}/v1" and api_key == key
    assert (env_id, seed, kwargs) == ("agentrl/Toy-v0", "11", '{"max_turns": 4}')


def test_collect_harness_episodes_groups(renderer, reply_ids):
    engine = ScriptedEngine([reply_ids("<action>look</action>")], eos_token_id=renderer.eos_token_id)
    spec = HarnessSpec(command=AGENT + ("--max-turns", "2"), env_id="agentrl/Toy-v0", timeout_s=60)
    eps = collect_harness_episodes(engine, renderer, spec, n_groups=2, group_size=2, seed=40, run_id="r",
                                   max_parallel=4)
    assert [(e.episode_id, e.group_id, e.seed) for e in eps] == [(0, 0, 40), (1, 0, 40), (2, 1, 41), (3, 1, 41)]
    assert all(e.status == EpisodeStatus.OK and len(e.turns) == 2 and e.return_ == 0.0 for e in eps)
    assert all(t.run_id == "r" and t.info["sampling"]["temperature"] == 1.0 for e in eps for t in e.turns)
    assert eps[0].task_id == eps[1].task_id  # same task inside a group


def test_harness_spec_validation():
    with pytest.raises(ValueError, match="command is empty"):
        HarnessSpec(command=(), env_id="agentrl/Toy-v0")
    with pytest.raises(ValueError, match="timeout_s"):
        HarnessSpec(command=("x",), env_id="agentrl/Toy-v0", timeout_s=0)
    with pytest.raises(KeyError, match="did you mean 'agentrl/Toy-v0'"):
        HarnessSpec(command=("x",), env_id="agentrl/Toyy-v0")


def test_collect_harness_episodes_plays_the_named_tasks(renderer, reply_ids):
    """``tasks`` (a held-out panel): each group plays its task by id (``AGENTRL_TASK_ID``), and the
    verifier replays that task, not the one the seed would draw."""
    engine = ScriptedEngine([reply_ids("<action>look</action>")], eos_token_id=renderer.eos_token_id)
    spec = HarnessSpec(command=AGENT + ("--max-turns", "1"), env_id="agentrl/Toy-v0", env_kwargs={"split": "eval"},
                       timeout_s=60)
    tasks = [("rooms5-key4-door2", 7), ("rooms3-key2-door1", 7)]
    eps = collect_harness_episodes(engine, renderer, spec, n_groups=2, tasks=tasks, max_parallel=2)
    assert [(e.task_id, e.seed) for e in eps] == tasks and all(e.status == EpisodeStatus.OK for e in eps)
    assert eps[0].turns[0].observation.endswith("You are in room 1 of 5.\nAdmissible actions: go east, inventory, look")
    assert "room 1 of 3" in eps[1].turns[0].observation
    with pytest.raises(ValueError, match="tasks lists 2"):
        collect_harness_episodes(engine, renderer, spec, n_groups=3, tasks=tasks)


def test_json_actions_are_constrained_to_the_admissible_ones(tiny_engine, renderer):
    """examples/harness_agent.py --json-actions on the tiny random model: every reply is
    {"action": one of the admissible actions} (grammar-constrained through the proxy), recorded
    with its grammar; no action is invalid."""
    spec = HarnessSpec(command=AGENT + ("--max-turns", "4", "--max-tokens", "24", "--json-actions"),
                       env_id="agentrl/Toy-v0", timeout_s=120)
    eps = collect_harness_episodes(tiny_engine, renderer, spec, n_groups=2, group_size=2, seed=3, max_parallel=4)
    turns = [t for e in eps for t in e.turns]
    assert all(e.status == EpisodeStatus.OK for e in eps) and len(turns) >= 4
    assert all(t.action_valid and t.info["grammar"]["kind"] == "json_schema" for t in turns)
    assert all(t.action in ("go east", "go west", "take key", "open door", "look", "inventory") for t in turns)


def test_example_agent_window_and_goal(renderer, reply_ids):
    """--window 2: each call sends the system prompt (with --goal) and one user message holding the
    last 2 actions and the current observation, so every call is its own segment."""
    engine = ScriptedEngine([reply_ids("<action>go east</action>")], eos_token_id=renderer.eos_token_id)
    spec = HarnessSpec(command=AGENT + ("--max-turns", "3", "--window", "2", "--goal", "Open the door."),
                       env_id="agentrl/Toy-v0", timeout_s=60)
    (ep,) = collect_harness_episodes(engine, renderer, spec, n_groups=1, seed=5)
    obs = [t.observation for t in ep.turns]
    assert [t.action for t in ep.turns] == ["go east"] * 3
    assert "Open the door.\nTurn 1 of 3.\nYou are in room 1 of " in obs[0] and "last actions" not in obs[0]
    assert "Turn 2 of 3.\nYour last actions: go east.\nYou are in room 2" in obs[1]
    assert "Turn 3 of 3.\nYour last actions: go east, go east.\nYou are in room 3" in obs[2]
    assert [t.info["segment"] for t in ep.turns] == [0, 1, 2]  # a new prompt each call, not a continuation


def test_example_agent_goal_each_turn(renderer, reply_ids):
    """--goal-each-turn with --window: the goal heads each user message ("Goal: ...") and is no longer in the
    system prompt; without --window the flag changes nothing (the goal stays in the system prompt)."""
    engine = ScriptedEngine([reply_ids("<action>go east</action>")], eos_token_id=renderer.eos_token_id)
    base = AGENT + ("--max-turns", "2", "--goal", "Open the door.", "--goal-each-turn")
    spec = HarnessSpec(command=base + ("--window", "2"), env_id="agentrl/Toy-v0", timeout_s=60)
    (ep,) = collect_harness_episodes(engine, renderer, spec, n_groups=1, seed=5)
    first, second = (t.observation for t in ep.turns)
    assert first.count("Open the door.") == 1 and "Goal: Open the door.\nTurn 1 of 2.\nYou are in room 1 of " in first
    assert second.count("Open the door.") == 1 and "Goal: Open the door.\nTurn 2 of 2.\nYour last actions: go east." in second
    spec = HarnessSpec(command=base, env_id="agentrl/Toy-v0", timeout_s=60)
    (whole,) = collect_harness_episodes(engine, renderer, spec, n_groups=1, seed=5)
    assert "Goal:" not in whole.turns[0].observation and "Open the door." in whole.turns[0].observation

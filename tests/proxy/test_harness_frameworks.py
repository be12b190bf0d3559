"""Real agent frameworks, unmodified, as harnesses (issue 24): each ``examples/harness_*.py``
plays agentrl/Toy-v0 through the recording proxy with its framework's default API and one
function tool. The policy is scripted (the walkthrough as tool calls, then a final answer) so
that every framework's tool loop runs to a win; each test checks that every call is one turn
with the exact sampled ids and logprobs, that later prompts extend earlier ones token for
token, the verifier's reward, the store round trip, and trains the tiny model on the turns
(the trainer's update phase). Needs the ``harness`` extra (scripts/setup.sh installs it)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from agentrl.types import EpisodeStatus
from harness_frameworks import Game, check_token_exact, play_all, store_and_train

torch.set_num_threads(1)
SKIP = "needs the harness extra: pip install 'agentrl[harness]'"
GAMES = {"openai_agents": Game("harness_openai_agents.py", seed=5), "langgraph": Game("harness_langgraph.py", seed=11),
         "anthropic": Game("harness_anthropic.py", seed=1),
         "smolagents": Game("harness_smolagents.py", seed=1, final_tool="final_answer")}


@pytest.fixture(scope="module")
def played(renderer, reply_ids):
    """name → future of its episode; all started at once, two at a time, in test order."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield play_all(GAMES, renderer, reply_ids, pool)


def _episode(played, reply_ids, name: str):
    return played[name].result(), GAMES[name].scripts(reply_ids)


def test_openai_agents_sdk_responses_api(played, renderer, reply_ids, tiny_dir, tmp_path):
    pytest.importorskip("agents", reason=SKIP)
    ep, scripts = _episode(played, reply_ids, "openai_agents")
    check_token_exact(ep, scripts, seed=5, dialect="responses")
    ignored = {f for t in ep.turns for f in t.info.get("ignored_fields", ())}
    assert "reasoning" in ignored  # the SDK's default model settings ask for reasoning effort: recorded, not refused
    store_and_train(ep, renderer, tiny_dir, tmp_path)


def test_langgraph_react_agent_chat_completions(played, renderer, reply_ids, tiny_dir, tmp_path):
    pytest.importorskip("langgraph.prebuilt", reason=SKIP)
    pytest.importorskip("langchain_openai", reason=SKIP)
    ep, scripts = _episode(played, reply_ids, "langgraph")
    check_token_exact(ep, scripts, seed=11, dialect="chat")
    store_and_train(ep, renderer, tiny_dir, tmp_path)


def test_anthropic_sdk_messages_tool_loop(played, renderer, reply_ids, tiny_dir, tmp_path):
    pytest.importorskip("anthropic", reason="needs the dev extra (anthropic SDK)")
    ep, scripts = _episode(played, reply_ids, "anthropic")
    check_token_exact(ep, scripts, seed=1, dialect="messages")
    store_and_train(ep, renderer, tiny_dir, tmp_path)


def test_smolagents_tool_calling_agent_forced_tools(played, renderer, reply_ids, tiny_dir, tmp_path):
    pytest.importorskip("smolagents", reason=SKIP)
    pytest.importorskip("llguidance", reason="forced tool calls need the grammar extra: pip install 'agentrl[grammar]'")
    ep, scripts = _episode(played, reply_ids, "smolagents")
    # smolagents writes its own calls back as text ("Calling tools: [...]", "Observation: ..."): a fork per call
    check_token_exact(ep, scripts, seed=1, dialect="chat", final_tool_calls=1, rewrites=True)
    for t in ep.turns:  # every call forced a call of one of its tools (act, final_answer)
        assert t.info["grammar"]["kind"] == "tool_call" and len(t.info["grammar_digest"]) == 16
        assert sorted(name for name, _ in t.info["grammar"]["tools"]) == ["act", "final_answer"]
        assert "stop" not in t.info  # its stop strings ("Observation:", "Calling tools:") never cut a call
    store_and_train(ep, renderer, tiny_dir, tmp_path)


def _walk(env_id: str, seed: int) -> tuple[list[str], list[list[str]]]:
    """The game's walkthrough and the admissible actions before each of its steps and after the last."""
    from agentrl.env import make

    env = make(env_id)
    _, info = env.reset(seed=seed)
    walk, admissible = list(info["walkthrough"]), [list(info["admissible_actions"])]
    for a in walk:
        _, _, term, _, info = env.step(a)
        admissible.append(list(info["admissible_actions"]))
    env.close()
    assert term and len(walk) >= 1  # the walkthrough wins
    return walk, admissible


def test_smolagents_enum_actions_follow_the_state_on_textworld(renderer, reply_ids):
    """``harness_smolagents.py --enum-actions`` on a TextWorld-CU1 game: the ``act`` tool smolagents
    declares on each call has the current room's admissible commands as its ``command`` enum (renewed
    after every step), so the proxy's forced-call grammar follows the state; with ``--until-over`` a final
    answer before the game ends is refused (the agent is told and goes on); a scripted walkthrough wins."""
    pytest.importorskip("smolagents", reason=SKIP)
    pytest.importorskip("llguidance", reason="forced tool calls need the grammar extra: pip install 'agentrl[grammar]'")
    from agentrl.proxy import RecordingProxy
    from agentrl.rollout.harness import HarnessSpec, run_harness
    from harness_frameworks import FINAL, ROOT, GrammarScriptedEngine, tool_call

    env_id, seed = "agentrl/TextWorld-CU1-v0", 3
    walk, admissible = _walk(env_id, seed)
    final = reply_ids(tool_call({"answer": FINAL}, "final_answer"))
    scripts = [final] + [reply_ids(tool_call({"command": a})) for a in walk] + [final]  # gives up first: refused
    engine = GrammarScriptedEngine(scripts, eos_token_id=renderer.eos_token_id, logprob=-0.25)
    spec = HarnessSpec(command=("{python}", str(ROOT / "examples" / "harness_smolagents.py"), "--enum-actions",
                                "--until-over", "--max-steps", "8"), env_id=env_id, timeout_s=300)
    proxy = RecordingProxy(engine, renderer)
    with proxy.serve():
        ep = run_harness(proxy, spec, seed=seed)
    assert ep.status == EpisodeStatus.OK and ep.success and len(ep.turns) == len(walk) + 2  # replayed: won
    assert "the game is not over yet" in ep.turns[1].observation  # the refused final answer, told to the agent
    for t, acts in zip(ep.turns, [admissible[0]] + admissible):  # the last call (final_answer) after the win
        schema = json.loads(dict(t.info["grammar"]["tools"])["act"])  # (name, schema as JSON text)
        assert schema["properties"]["command"]["enum"] == acts


def test_openai_agents_enum_actions_and_stop_when_over_on_textworld(renderer, reply_ids):
    """``harness_openai_agents.py --enum-actions --stop-when-over`` on a TextWorld-CU1 game through a proxy
    that forces a tool call (``force_tools``: the SDK offers its tool with ``tool_choice`` auto): the ``act``
    tool the SDK sends on each call declares the current room's admissible commands as its enum (renewed
    after every step), the forced call is decoded under it, the run ends with the winning call (no call
    after it: the SDK's ``tool_use_behavior``), and every call extends the episode's one token thread."""
    pytest.importorskip("agents", reason=SKIP)
    pytest.importorskip("llguidance", reason="forced tool calls need the grammar extra: pip install 'agentrl[grammar]'")
    from agentrl.proxy import RecordingProxy
    from agentrl.rollout.harness import HarnessSpec, run_harness
    from harness_frameworks import ROOT, GrammarScriptedEngine, tool_call

    env_id, seed = "agentrl/TextWorld-CU1-v0", 3
    walk, admissible = _walk(env_id, seed)
    admissible = admissible[:-1]  # the states the calls are made in: the winning call is the last
    scripts = [reply_ids(tool_call({"command": a})) for a in walk] + [reply_ids("I won.")] * 2  # never reached
    engine = GrammarScriptedEngine(scripts, eos_token_id=renderer.eos_token_id, logprob=-0.25)
    spec = HarnessSpec(command=("{python}", str(ROOT / "examples" / "harness_openai_agents.py"), "--enum-actions",
                                "--stop-when-over", "--max-turns", "12"), env_id=env_id, timeout_s=300)
    proxy = RecordingProxy(engine, renderer, force_tools=True)
    with proxy.serve():
        ep = run_harness(proxy, spec, seed=seed)
    assert ep.status == EpisodeStatus.OK and ep.success and [t.action for t in ep.turns] == walk
    for t, acts in zip(ep.turns, admissible, strict=True):
        assert t.info["dialect"] == "responses" and t.info["grammar"]["kind"] == "tool_call"
        schema = json.loads(dict(t.info["grammar"]["tools"])["act"])
        assert schema["properties"]["command"]["enum"] == acts
    assert [t.info["fork"] for t in ep.turns] == [False] * len(walk)

"""Forced tool calls and JSON output through the recording proxy (tiny HF model, official
SDKs): the reply always parses, the turn records its grammar, and the update's recompute of
its logprobs from the rebuilt masks matches what was stored (PPO ratio 1)."""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest

pytest.importorskip("llguidance", reason="needs the grammar extra: pip install 'agentrl[grammar]'")

from agentrl.llm.scripted import ScriptedEngine  # noqa: E402

ARGS = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 4}, "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": ARGS}},
         {"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "properties": {},
                                                                          "additionalProperties": False}}}]
MSG = [{"role": "user", "content": "Weather in Oslo?"}]


def _check_turns(ep, renderer, model, gap):
    for t in ep.turns:
        assert t.info["grammar"]["kind"] in ("tool_call", "json_schema") and len(t.info["grammar_digest"]) == 16
    assert gap(model, ep.turns, renderer, renderer.tokenizer.pad_token_id) < 1e-4


def test_chat_forced_tools_and_json_schema(serve, renderer, tiny_engine, update_logprob_gap):
    with serve(tiny_engine) as proxy:
        h = proxy.create_episode()
        client = openai.OpenAI(base_url=h.base_url, api_key=h.api_key, max_retries=0)
        kw = dict(model="p", messages=MSG, tools=TOOLS, max_tokens=60, temperature=1.0, seed=5)
        req = client.chat.completions.create(tool_choice="required", **kw)
        named = client.chat.completions.create(tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                               **kw)
        fmt = {"type": "json_schema", "json_schema": {"name": "w", "schema": ARGS}}
        js = client.chat.completions.create(model="p", messages=MSG, max_tokens=60, seed=6, response_format=fmt)
        obj = client.chat.completions.create(model="p", messages=MSG, max_tokens=12, temperature=0,
                                             response_format={"type": "json_object"})
        ep = proxy.close_episode(h.episode_id)
    assert req.choices[0].finish_reason == "tool_calls"
    assert req.choices[0].message.tool_calls[0].function.name in ("get_weather", "noop")
    call = named.choices[0].message.tool_calls[0].function
    assert call.name == "get_weather" and json.loads(call.arguments)["unit"] in ("c", "f")
    assert set(json.loads(js.choices[0].message.content)) == {"city", "unit"}
    # 12 tokens are too few for the random model's keys to end by themselves: the budget closes the object
    assert isinstance(json.loads(obj.choices[0].message.content), dict) and obj.choices[0].finish_reason == "stop"
    assert ep.turns[3].info["grammar_close_at"] < len(ep.turns[3].completion_ids) <= 12
    assert ep.turns[1].info["grammar"]["tools"][0][0] == "get_weather" and len(ep.turns[0].info["grammar"]["tools"]) == 2
    _check_turns(ep, renderer, tiny_engine.model, update_logprob_gap)


def test_responses_and_messages_force_a_tool(serve, renderer, tiny_engine, update_logprob_gap):
    with serve(tiny_engine) as proxy:
        h = proxy.create_episode()
        oa = openai.OpenAI(base_url=h.base_url, api_key=h.api_key, max_retries=0)
        rtools = [{"type": "function", "name": "get_weather", "parameters": ARGS}]
        r = oa.responses.create(model="p", input="Weather in Oslo?", tools=rtools, max_output_tokens=60,
                                tool_choice={"type": "function", "name": "get_weather"})
        rj = oa.responses.create(model="p", input="Weather?", max_output_tokens=60,
                                 text={"format": {"type": "json_schema", "name": "w", "schema": ARGS}})
        an = anthropic.Anthropic(base_url=h.anthropic_base_url, api_key="x", max_retries=0)
        m = an.messages.create(model="p", max_tokens=60, messages=MSG, tool_choice={"type": "tool", "name": "get_weather"},
                               tools=[{"name": "get_weather", "description": "Weather", "input_schema": ARGS}])
        ep = proxy.close_episode(h.episode_id)
    fc = [o for o in r.output if o.type == "function_call"]
    assert len(fc) == 1 and fc[0].name == "get_weather" and set(json.loads(fc[0].arguments)) == {"city", "unit"}
    assert set(json.loads(rj.output_text)) == {"city", "unit"}
    uses = [b for b in m.content if b.type == "tool_use"]
    assert m.stop_reason == "tool_use" and uses[0].name == "get_weather" and set(uses[0].input) == {"city", "unit"}
    assert [t.info["dialect"] for t in ep.turns] == ["responses", "responses", "messages"]
    _check_turns(ep, renderer, tiny_engine.model, update_logprob_gap)


@pytest.mark.parametrize("body, param, words", [
    ({"tool_choice": "required"}, "tool_choice", "no function tool is offered"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice",
     "'nope', which is not among"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice",
     "cannot be both"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format.json_schema.schema",
     "JSON schema object"),
    ({"response_format": {"type": "regex"}}, "response_format", "'regex' is not supported"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "wat"}}}}, "response_format",
     "cannot be honoured"),
])
def test_bad_forcing_is_a_400(serve, tiny_engine, body, param, words):
    with serve(tiny_engine) as proxy:
        h = proxy.create_episode()
        r = httpx.post(f"{h.base_url}/chat/completions", json={"messages": MSG, "max_tokens": 4, **body}, timeout=30)
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == param and words in err["message"], err
        assert proxy.close_episode(h.episode_id).turns == []


def test_an_engine_without_grammars_refuses_by_name(serve, renderer, reply_ids):
    engine = ScriptedEngine([reply_ids("x")], eos_token_id=renderer.eos_token_id)
    with serve(engine) as proxy:
        h = proxy.create_episode()
        body = {"messages": MSG, "tools": TOOLS, "tool_choice": "required"}
        r = httpx.post(f"{h.base_url}/chat/completions", json=body, timeout=30)
    assert r.status_code == 400 and "ScriptedEngine does not provide" in r.json()["error"]["message"]


def test_server_side_tool_constraints(serve, renderer, tiny_engine, update_logprob_gap):
    """``tool_schemas`` / ``force_tools`` (``rollout.harness.tool_schemas``, ``force_tool_call``):
    the harness offers ``act(command: string)`` and forces nothing, the proxy forces a call and
    decodes ``command`` under its own enum — recorded in the turn's grammar, trained with it."""
    act = [{"type": "function", "function": {"name": "act", "parameters": {
        "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
    enum = {"type": "object", "properties": {"command": {"enum": ["go east", "go west"]}}, "required": ["command"],
            "additionalProperties": False}
    with serve(tiny_engine, tool_schemas={"act": enum}, force_tools=True) as proxy:
        h = proxy.create_episode()
        client = openai.OpenAI(base_url=h.base_url, api_key=h.api_key, max_retries=0)
        outs = [client.chat.completions.create(model="p", messages=[{"role": "user", "content": f"room {s}"}], tools=act,
                                               max_tokens=40, temperature=1.0, seed=s) for s in range(4)]
        free = client.chat.completions.create(model="p", messages=MSG, max_tokens=4, seed=0)  # no tools: untouched
        ep = proxy.close_episode(h.episode_id)
    for out in outs:
        (call,) = out.choices[0].message.tool_calls
        assert call.function.name == "act" and json.loads(call.function.arguments)["command"] in ("go east", "go west")
    assert free.choices[0].message.tool_calls is None and "grammar" not in ep.turns[-1].info
    for t in ep.turns[:4]:
        assert t.info["grammar"]["kind"] == "tool_call" and json.loads(t.info["grammar"]["tools"][0][1]) == enum
        assert t.info["tool_args_invalid"] == 0
    ep.turns = ep.turns[:4]  # the constrained ones
    _check_turns(ep, renderer, tiny_engine.model, update_logprob_gap)


def test_server_constraints_by_hand():
    from agentrl.llm.grammar import GrammarSpec
    from agentrl.proxy.forcing import server_constraints

    spec = GrammarSpec.tool_call([("get_weather", ARGS), ("noop", None)])
    assert server_constraints(spec, tuple(TOOLS), None, False) is spec
    assert server_constraints(None, tuple(TOOLS), None, False) is None
    forced = server_constraints(None, tuple(TOOLS), None, True)
    assert forced.kind == "tool_call" and [n for n, _ in forced.tools] == ["get_weather", "noop"]
    swapped = server_constraints(spec, tuple(TOOLS), {"noop": {"type": "object", "maxProperties": 0}}, False)
    assert json.loads(dict(swapped.tools)["noop"]) == {"type": "object", "maxProperties": 0}
    assert json.loads(dict(swapped.tools)["get_weather"]) == ARGS
    fmt = GrammarSpec.json_schema(ARGS)  # JSON output asked for: kept, never forced into a tool call
    assert server_constraints(fmt, tuple(TOOLS), {"noop": {}}, True) is fmt
    assert server_constraints(None, ({"type": "web_search"},), None, True) is None  # no function tool to force


def test_only_tools_by_hand():
    """``only_tools`` (``rollout.harness.only_tools``): a forced call may call only the listed tools of those it
    allows (smolagents forces ``required`` over ``act`` and its own ``final_answer``)."""
    from agentrl.llm.grammar import GrammarSpec
    from agentrl.proxy.forcing import server_constraints

    spec = GrammarSpec.tool_call([("get_weather", ARGS), ("noop", None)])
    only = server_constraints(spec, tuple(TOOLS), None, False, ("noop",))
    assert only.kind == "tool_call" and [n for n, _ in only.tools] == ["noop"]
    assert server_constraints(spec, tuple(TOOLS), None, False, ("elsewhere",)) is spec  # none of them: kept
    forced = server_constraints(None, tuple(TOOLS), None, True, ("get_weather",))  # forced by the server, then cut
    assert [n for n, _ in forced.tools] == ["get_weather"]
    fmt = GrammarSpec.json_schema(ARGS)
    assert server_constraints(fmt, tuple(TOOLS), None, False, ("noop",)) is fmt  # JSON output: not a tool call
    swapped = server_constraints(spec, tuple(TOOLS), {"noop": {"type": "object", "maxProperties": 0}}, False, ("noop",))
    assert [(n, json.loads(s)) for n, s in swapped.tools] == [("noop", {"type": "object", "maxProperties": 0})]


def test_only_tools_through_the_proxy(serve, renderer, tiny_engine):
    """A request forcing ``required`` over two tools, served with ``only_tools=("act",)``: every call is ``act``,
    and the turn records the grammar it was decoded under (only ``act``)."""
    tools = [{"type": "function", "function": {"name": "act", "parameters": {
        "type": "object", "properties": {"command": {"enum": ["go east", "go west"]}}, "required": ["command"]}}},
        {"type": "function", "function": {"name": "final_answer", "parameters": {
            "type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}}}]
    with serve(tiny_engine, only_tools=("act",)) as proxy:
        h = proxy.create_episode()
        client = openai.OpenAI(base_url=h.base_url, api_key=h.api_key, max_retries=0)
        outs = [client.chat.completions.create(model="p", messages=[{"role": "user", "content": f"room {s}"}],
                                               tools=tools, tool_choice="required", max_tokens=40, temperature=1.0,
                                               seed=s) for s in range(4)]
        ep = proxy.close_episode(h.episode_id)
    assert all(o.choices[0].message.tool_calls[0].function.name == "act" for o in outs)
    assert all([n for n, _ in t.info["grammar"]["tools"]] == ["act"] for t in ep.turns)


def test_only_tools_in_a_config():
    from pathlib import Path

    from agentrl.config import ConfigError, load_config

    cfg = Path(__file__).resolve().parents[2] / "examples" / "harness_smolagents_textworld.yaml"
    assert load_config(cfg).rollout.harness.only_tools == ("act",)
    assert load_config(cfg, ["rollout.harness.only_tools=null"]).rollout.harness.only_tools is None
    with pytest.raises(ConfigError, match="only_tools lists tool names"):
        load_config(cfg, ["rollout.harness.only_tools=[]"])

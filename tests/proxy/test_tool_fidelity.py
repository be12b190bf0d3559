"""Tool-call parse fidelity (issue 53): markup the parser did not turn into a call and calls
whose arguments break their schema are counted per turn and per iteration, and flagged in the
store and the viewer — never dropped silently."""

from __future__ import annotations

import httpx
import pytest

from agentrl.llm.scripted import ScriptedEngine
from agentrl.proxy.turn_fields import tool_call_checks
from agentrl.proxy.wire import ToolCall

GO = {"type": "function", "function": {"name": "go", "parameters": {
    "type": "object", "properties": {"direction": {"type": "string", "enum": ["east", "west"]}},
    "required": ["direction"], "additionalProperties": False}}}
LOOK = {"type": "function", "function": {"name": "look"}}  # no parameters: any object


@pytest.mark.parametrize("text, calls, unparsed, invalid, words", [
    ('<tool_call>{"name": "go", "arguments": {"direction": "east"}}</tool_call>',
     [ToolCall("c", "go", '{"direction": "east"}')], 0, 0, None),
    ('<tool_call>{"name": "look", "arguments": {"x": 1}}</tool_call>', [ToolCall("c", "look", '{"x": 1}')], 0, 0, None),
    ('<tool_call>{"name": "go", "arguments": {"direction": "up"}}</tool_call>',
     [ToolCall("c", "go", '{"direction": "up"}')], 0, 1, "'up' is not one of ['east', 'west']"),
    ('<tool_call>{"name": "go", "arguments": {}}</tool_call>', [ToolCall("c", "go", "{}")], 0, 1,
     "'direction' is a required property"),
    ('<tool_call>{"name": "fly", "arguments": {}}</tool_call>', [ToolCall("c", "fly", "{}")], 0, 1,
     "'fly', which was not offered (offered: ['go', 'look'])"),
    ('<tool_call>{"name": "go", "arguments": "dir=east"}</tool_call>', [ToolCall("c", "go", "dir=east")], 0, 1,
     "arguments are not JSON"),
    ('thinking... <tool_call>{name: go}</tool_call> and <tool_call>{"name": "look"}</tool_call>',
     [ToolCall("c", "look", "{}")], 1, 0, "1 <tool_call> block(s) not parsed"),
    ("<tool_call>{\"name\": \"go\", \"argu", [], 1, 0, "not parsed"),  # cut by max_tokens
])
def test_tool_call_checks_by_hand(text, calls, unparsed, invalid, words):
    out = tool_call_checks(text, calls, [GO, LOOK])
    assert out["tool_markup_unparsed"] == unparsed and out["tool_args_invalid"] == invalid
    if words is None:
        assert "tool_call_errors" not in out
    else:
        assert any(words in e for e in out["tool_call_errors"]), out
    assert tool_call_checks(text, calls, []) == {}  # no tools offered: markup is plain text, nothing to check


def test_flagged_through_the_proxy_the_metrics_and_the_viewer(serve, renderer, reply_ids, tmp_path):
    pytest.importorskip("jinja2")
    from fastapi.testclient import TestClient

    from agentrl.rollout.stats import proxy_metrics
    from agentrl.store import TurnStore
    from agentrl.view import ViewerOptions, create_app

    replies = [reply_ids('<tool_call>{"name": "go", "arguments": {"direction": "up"}}</tool_call>'),
               reply_ids("<tool_call>{name: go}</tool_call>"),
               reply_ids('<tool_call>{"name": "go", "arguments": {"direction": "east"}}</tool_call>')]
    engine = ScriptedEngine(replies, eos_token_id=renderer.eos_token_id)
    messages = [{"role": "user", "content": "where to?"}]
    with serve(engine) as proxy:
        h = proxy.create_episode()
        bodies = [httpx.post(f"{h.base_url}/chat/completions", json={"messages": messages, "tools": [GO]}, timeout=30)
                  .json()["choices"][0] for _ in replies]
        ep = proxy.close_episode(h.episode_id)
    assert bodies[0]["message"]["tool_calls"][0]["function"]["arguments"] == '{"direction":"up"}'  # passed on, flagged
    assert bodies[1]["message"]["content"] == "<tool_call>{name: go}</tool_call>" and not bodies[1]["message"].get(
        "tool_calls")  # the harness gets text: counted, not silent
    assert [(t.info["tool_markup_unparsed"], t.info["tool_args_invalid"]) for t in ep.turns] == [(0, 1), (1, 0), (0, 0)]
    m = proxy_metrics([ep])
    assert (m["proxy/tool_markup_unparsed"], m["proxy/tool_args_invalid"], m["proxy/tool_turns_flagged"]) == (1, 1, 2)
    with TurnStore(tmp_path / "s.db") as store:
        store.add_episodes([ep], run_id="proxy")
        eid = store.episodes("proxy")[0].episode_id
    html = TestClient(create_app(ViewerOptions(store=tmp_path / "s.db"))).get(f"/episode?run=proxy&episode={eid}").text
    assert html.count('class="badge tool-flag"') == 2 and "is not one of" in html

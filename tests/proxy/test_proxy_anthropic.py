"""``POST /v1/messages`` (Anthropic Messages API) through the recording proxy, driven by the
official ``anthropic`` SDK: a tool_use / tool_result round trip, streamed and not, recorded
token-exact, later turns extending earlier ones (no fork); stop sequences; clear 400s."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from agentrl.llm.scripted import ScriptedEngine

anthropic = pytest.importorskip("anthropic", reason="needs the dev extra (anthropic SDK)")

SYSTEM = "You answer weather questions."
TOOLS = [{"name": "get_weather", "description": "Weather of a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def _client(h):
    return anthropic.Anthropic(base_url=h.anthropic_base_url, api_key=h.api_key, max_retries=0)


def _assistant(msg) -> dict:
    return {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]}


@pytest.mark.parametrize("stream", [False, True])
def test_tool_use_round_trip_is_recorded_token_exact(serve, renderer, reply_ids, stream):
    replies = [reply_ids("Let me check.\n" + CALL), reply_ids("It is sunny in Paris."), reply_ids("Bye.")]
    engine = ScriptedEngine(replies, eos_token_id=renderer.eos_token_id)
    with serve(engine) as proxy:
        h = proxy.create_episode(seed=2)
        client = _client(h)

        def ask(messages):
            kw = dict(model="policy", max_tokens=64, system=SYSTEM, messages=messages, tools=TOOLS)
            if not stream:
                return client.messages.create(**kw)
            with client.messages.stream(**kw) as s:
                kinds = [e.type for e in s]
                msg = s.get_final_message()
            assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "message_delta" in kinds
            return msg

        messages = [{"role": "user", "content": "Weather in Paris?"}]
        m1 = ask(messages)
        assert m1.stop_reason == "tool_use" and [b.type for b in m1.content] == ["text", "tool_use"]
        text, use = m1.content
        assert text.text == "Let me check." and use.name == "get_weather" and use.input == {"city": "Paris"}
        messages = messages + [_assistant(m1), {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]}]
        m2 = ask(messages)
        assert m2.content[0].text == "It is sunny in Paris." and m2.stop_reason == "end_turn"
        assert m2.usage.output_tokens == len(replies[1])
        messages = messages + [_assistant(m2), {"role": "user", "content": [{"type": "text", "text": "Thanks!"}]}]
        assert ask(messages).content[0].text == "Bye."
        ep = proxy.close_episode(h.episode_id)
    for k, turn in enumerate(ep.turns):
        assert turn.completion_ids.tolist() == replies[k]
        assert np.array_equal(turn.prompt_ids, engine.prompts[k])
        assert turn.info["dialect"] == "messages" and turn.info["trainable"] and turn.info["stream"] is stream
    for a, b in zip(ep.turns, ep.turns[1:]):
        head = np.concatenate([a.prompt_ids, a.completion_ids, renderer.bridge_ids(a.completion_ids)])
        assert np.array_equal(b.prompt_ids[: head.size], head)
        assert b.info["prompt_source"] == "tito" and b.info["fork"] is False and b.info["token_prefix_ok"] is True
    assert ep.turns[-1].info["forks"] == 0 and ep.turns[1].observation == "sunny"
    assert "get_weather" in renderer.tokenizer.decode(ep.turns[0].prompt_ids.tolist())


def test_stop_sequences_thinking_and_ignored_keys(serve, renderer, reply_ids):
    first = reply_ids("Thought: east\nObservation: more")
    engine = ScriptedEngine([first, reply_ids("ok")], eos_token_id=renderer.eos_token_id)
    with serve(engine) as proxy:
        h = proxy.create_episode()
        client = _client(h)
        m = client.messages.create(model="p", max_tokens=64, messages=[{"role": "user", "content": "go"}],
                                   stop_sequences=["\nObservation:"], extra_body={"top_k": 5})
        assert m.content[0].text == "Thought: east" and m.stop_reason == "stop_sequence"
        assert m.stop_sequence == "\nObservation:"
        history = [{"role": "user", "content": "go"},
                   {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "x"},
                                                     {"type": "text", "text": "Thought: east"}]},
                   {"role": "user", "content": "next"}]
        assert client.messages.create(model="p", max_tokens=8, messages=history).content[0].text == "ok"
        n = client.messages.count_tokens(model="p", messages=[{"role": "user", "content": "go"}])
        ep = proxy.close_episode(h.episode_id)
    t0, t1 = ep.turns
    assert t0.completion_ids.tolist() == first[: t0.completion_ids.size] and t0.info["stop"] == "\nObservation:"
    assert t0.info["ignored_fields"] == ["top_k"] and t1.info["ignored_fields"] == ["messages.thinking"]
    assert t1.info["prompt_source"] == "tito" and t1.info["fork"] is False
    assert n.input_tokens > 0


@pytest.mark.parametrize("body, param, words", [
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type", "custom tools"),
    ({"tool_choice": {"type": "any"}}, "tool_choice", "no function tool is offered"),
    ({"tool_choice": {"type": "bogus"}}, "tool_choice", "'bogus' is not supported"),
    ({"output_config": {"format": {"type": "json_schema", "schema": {}}}}, "output_config.format",
     "ScriptedEngine does not provide"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "messages[0].content[0].type",
     "'image'"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role", "'system'"),
    ({"max_tokens": 0}, "max_tokens", ">= 1"),
])
def test_bad_messages_requests_are_anthropic_400s(serve, renderer, reply_ids, body, param, words):
    engine = ScriptedEngine([reply_ids("x")], eos_token_id=renderer.eos_token_id)
    with serve(engine) as proxy:
        h = proxy.create_episode()
        full = {"model": "p", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], **body}
        r = httpx.post(f"{h.anthropic_base_url}/v1/messages", json=full, timeout=30)
        assert r.status_code == 400, r.text
        assert r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error"
        assert r.json()["error"]["param"] == param and words in r.json()["error"]["message"], r.json()
        with pytest.raises(anthropic.BadRequestError):
            _client(h).messages.create(**full)
        assert proxy.close_episode(h.episode_id).turns == []


def test_x_api_key_on_the_shared_route(serve, renderer, reply_ids):
    engine = ScriptedEngine([reply_ids("hello")], eos_token_id=renderer.eos_token_id)
    with serve(engine) as proxy:
        h = proxy.create_episode()
        client = anthropic.Anthropic(base_url=proxy.url, api_key=h.api_key, max_retries=0)
        assert client.messages.create(model="p", max_tokens=8,
                                      messages=[{"role": "user", "content": "hi"}]).content[0].text == "hello"
        bad = anthropic.Anthropic(base_url=proxy.url, api_key="nope", max_retries=0)
        with pytest.raises(anthropic.AuthenticationError):
            bad.messages.create(model="p", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
        assert len(proxy.close_episode(h.episode_id).turns) == 1

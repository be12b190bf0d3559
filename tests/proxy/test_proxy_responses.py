"""``POST /v1/responses`` (OpenAI Responses API) through the recording proxy, driven by the
official ``openai`` SDK: a function-tool round trip, streamed and not, recorded token-exact,
later turns extending earlier ones (no fork), ``previous_response_id``, clear 400s."""

from __future__ import annotations

import json

import httpx
import numpy as np
import openai
import pytest

from agentrl.llm.scripted import ScriptedEngine

INSTRUCTIONS = "You answer weather questions."
TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather of a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def _items(resp) -> list[dict]:
    return [item.model_dump(exclude_none=True) for item in resp.output]


def _check_exact_and_extending(ep, engine, replies, renderer):
    for k, turn in enumerate(ep.turns):
        assert turn.completion_ids.tolist() == replies[k]  # the sampled ids, EOS included
        assert np.array_equal(turn.prompt_ids, engine.prompts[k])  # what the engine was fed
        np.testing.assert_array_equal(turn.completion_logprobs, np.full(len(replies[k]), -0.5, np.float32))
        assert turn.info["dialect"] == "responses" and turn.info["trainable"]
    for a, b in zip(ep.turns, ep.turns[1:]):
        head = np.concatenate([a.prompt_ids, a.completion_ids, renderer.bridge_ids(a.completion_ids)])
        assert np.array_equal(b.prompt_ids[: head.size], head)
        assert b.info["prompt_source"] == "tito" and b.info["fork"] is False and b.info["token_prefix_ok"] is True
    assert [t.info["segment"] for t in ep.turns] == [0] * len(ep.turns) and ep.turns[-1].info["forks"] == 0


@pytest.mark.parametrize("stream", [False, True])
def test_function_tool_round_trip_is_recorded_token_exact(serve, renderer, reply_ids, stream):
    replies = [reply_ids(CALL), reply_ids("It is sunny in Paris."), reply_ids("Bye.")]
    engine = ScriptedEngine(replies, eos_token_id=renderer.eos_token_id)
    with serve(engine) as proxy:
        h = proxy.create_episode(seed=5)
        client = openai.OpenAI(base_url=h.base_url, api_key=h.api_key, max_retries=0)

        def ask(items):
            kw = dict(model="policy", instructions=INSTRUCTIONS, input=items, tools=TOOLS)
            if not stream:
                return client.responses.create(**kw)
            events = list(client.responses.create(stream=True, **kw))
            kinds = [e.type for e in events]
            assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
            assert [e.sequence_number for e in events] == list(range(len(events)))
            final = events[-1].response
            deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
            assert deltas == final.output_text
            return final

        items = [{"role": "user", "content": "Weather in Paris?"}]
        r1 = ask(items)
        (fc,) = [o for o in r1.output if o.type == "function_call"]
        assert fc.name == "get_weather" and json.loads(fc.arguments) == {"city": "Paris"} and r1.output_text == ""
        items = items + _items(r1) + [{"type": "function_call_output", "call_id": fc.call_id, "output": "sunny"}]
        r2 = ask(items)
        assert r2.output_text == "It is sunny in Paris." and r2.status == "completed"
        assert r2.usage.output_tokens == len(replies[1])
        items = items + _items(r2) + [{"role": "user", "content": [{"type": "input_text", "text": "Thanks!"}]}]
        assert ask(items).output_text == "Bye."
        ep = proxy.close_episode(h.episode_id)
    _check_exact_and_extending(ep, engine, replies, renderer)
    assert ep.turns[1].observation == "sunny" and ep.turns[0].info["tool_calls"] == 1
    assert "get_weather" in renderer.tokenizer.decode(ep.turns[0].prompt_ids.tolist())  # tools in the prompt
    assert [t.info["stream"] for t in ep.turns] == [stream] * 3


def test_stream_helper_and_previous_response_id(serve, renderer, reply_ids):
    """``client.responses.stream`` (the SDK's accumulating helper) parses the events; a call
    continuing with ``previous_response_id`` extends the thread like a full resend would."""
    replies = [reply_ids(CALL), reply_ids("Sunny.")]
    engine = ScriptedEngine(replies, eos_token_id=renderer.eos_token_id)
    with serve(engine) as proxy:
        h = proxy.create_episode()
        client = openai.OpenAI(base_url=h.base_url, api_key=h.api_key, max_retries=0)
        with client.responses.stream(model="p", instructions=INSTRUCTIONS, input="Weather in Paris?",
                                     tools=TOOLS) as s:
            r1 = s.get_final_response()
        (fc,) = r1.output
        out = [{"type": "function_call_output", "call_id": fc.call_id, "output": "sunny"}]
        r2 = client.responses.create(model="p", instructions=INSTRUCTIONS, previous_response_id=r1.id, input=out,
                                     tools=TOOLS)
        assert r2.output_text == "Sunny." and r2.previous_response_id == r1.id
        ep = proxy.close_episode(h.episode_id)
    _check_exact_and_extending(ep, engine, replies, renderer)


def test_logprobs_ignored_keys_and_incomplete(serve, renderer, reply_ids):
    engine = ScriptedEngine([reply_ids("go east now")], eos_token_id=renderer.eos_token_id)
    with serve(engine) as proxy:
        h = proxy.create_episode()
        client = openai.OpenAI(base_url=h.base_url, api_key=h.api_key, max_retries=0)
        r = client.responses.create(model="p", input="hi", include=["message.output_text.logprobs"], truncation="auto",
                                    reasoning=None, store=False, extra_body={"top_k": 5})
        lps = r.output[0].content[0].logprobs
        assert len(lps) == len(reply_ids("go east now")) and lps[0].logprob == -0.5
        r = client.responses.create(model="p", input="hi", max_output_tokens=2)
        assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
        ep = proxy.close_episode(h.episode_id)
    assert ep.turns[0].info["ignored_fields"] == ["top_k"]
    assert ep.turns[1].completion_ids.size == 2 and ep.turns[1].info["sampling"]["max_tokens"] == 2


@pytest.mark.parametrize("body, param, words", [
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0].type", "function tools"),
    ({"input": "hi", "tool_choice": "required"}, "tool_choice", "no function tool is offered"),
    ({"input": "hi", "text": {"format": {"type": "json_object"}}}, "text.format", "ScriptedEngine does not provide"),
    ({"input": "hi", "text": {"format": {"type": "json_schema"}}}, "text.format.schema", "JSON schema object"),
    ({"input": [{"type": "image_generation_call", "id": "x"}]}, "input[0].type", "image_generation_call"),
    ({"input": "hi", "previous_response_id": "resp_nope"}, "previous_response_id", "not a response"),
    ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens", ">= 1"),
    ({"input": "hi", "conversation": "conv_1"}, "conversation", "server-side"),
    ({"input": [{"role": "wizard", "content": "x"}]}, "input[0].role", "wizard"),
    ({"input": []}, "input", "non-empty"),
])
def test_bad_responses_requests_are_400(serve, renderer, reply_ids, body, param, words):
    engine = ScriptedEngine([reply_ids("x")], eos_token_id=renderer.eos_token_id)
    with serve(engine) as proxy:
        h = proxy.create_episode()
        r = httpx.post(f"{h.base_url}/responses", json=body, timeout=30)
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == param and words in err["message"], err
        assert proxy.close_episode(h.episode_id).turns == []

"""The official ``openai`` SDK (sync and async) drives episodes through the recording proxy;
what is recorded is exactly what the engine saw and sampled (PITFALLS P1/P2)."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import openai
import pytest

from agentrl.llm.scripted import ScriptedEngine

SYSTEM = {"role": "system", "content": "You play a text game."}


def _msg(out) -> dict:
    return out.choices[0].message.model_dump(exclude_none=True)


def test_sync_sdk_records_engine_ids_and_extends_prompts(serve, renderer, reply_ids):
    replies = [reply_ids("go east"), reply_ids("take key"), reply_ids("open door")]
    engine = ScriptedEngine(replies, eos_token_id=renderer.eos_token_id)
    with serve(engine) as proxy:
        h = proxy.create_episode(env_id="agentrl/Toy-v0", seed=3, group_id=2)
        client = openai.OpenAI(base_url=h.base_url, api_key=h.api_key, max_retries=0)
        messages = [SYSTEM, {"role": "user", "content": "You are in room 1 of 3."}]
        texts = []
        for obs in ("You are in room 2 of 3. A key lies on the floor.", "You take the key.", None):
            out = client.chat.completions.create(model="policy", messages=messages, max_tokens=16)
            texts.append(out.choices[0].message.content)
            if obs:
                messages = messages + [_msg(out), {"role": "user", "content": obs}]
        ep = proxy.close_episode(h.episode_id)
    assert texts == ["go east", "take key", "open door"]
    assert [t.t for t in ep.turns] == [0, 1, 2] and ep.group_id == 2 and ep.seed == 3
    for k, turn in enumerate(ep.turns):
        assert turn.completion_ids.tolist() == replies[k]  # verbatim, EOS included
        assert np.array_equal(turn.prompt_ids, engine.prompts[k])  # what the engine was fed
        np.testing.assert_array_equal(turn.completion_logprobs, np.full(len(replies[k]), -0.5, np.float32))
        assert turn.info["segment"] == 0 and turn.info["forks"] == 0 and turn.info["trainable"]
    for a, b in zip(ep.turns, ep.turns[1:]):  # next prompt = prompt + completion + template bridge + new message
        head = np.concatenate([a.prompt_ids, a.completion_ids, renderer.tail_ids])
        assert np.array_equal(b.prompt_ids[: head.size], head)
        assert b.info["prompt_source"] == "tito" and b.info["token_prefix_ok"] is True
    # canonical ids: the TITO prompt equals a full render of the same conversation
    from agentrl.types import Message

    conv = [Message(m["role"], m["content"]) for m in messages]
    assert np.array_equal(ep.turns[2].prompt_ids, renderer.render_ids(conv))


def test_async_sdk_concurrent_episodes(serve, renderer, reply_ids):
    engine = ScriptedEngine([reply_ids("look")], eos_token_id=renderer.eos_token_id)

    async def play(client: openai.AsyncOpenAI, room: int) -> list[str]:
        messages = [SYSTEM, {"role": "user", "content": f"You are in room {room}."}]
        out1 = await client.chat.completions.create(model="policy", messages=messages)
        messages += [_msg(out1), {"role": "user", "content": "Nothing happens."}]
        chunks = await client.chat.completions.create(model="policy", messages=messages, stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
        return [out1.choices[0].message.content, text]

    async def main(handles):
        clients = [openai.AsyncOpenAI(base_url=h.base_url, api_key=h.api_key, max_retries=0) for h in handles]
        return await asyncio.gather(*(play(c, i) for i, c in enumerate(clients)))

    with serve(engine) as proxy:
        handles = [proxy.create_episode(seed=i) for i in range(4)]
        results = asyncio.run(main(handles))
        episodes = [proxy.close_episode(h.episode_id) for h in handles]
    assert results == [["look", "look"]] * 4
    for i, ep in enumerate(episodes):
        assert len(ep.turns) == 2 and f"room {i}." in ep.turns[0].observation
        assert [t.info["stream"] for t in ep.turns] == [False, True]
        assert ep.turns[1].info["prompt_source"] == "tito" and ep.turns[1].info["segment"] == 0
        head = np.concatenate([ep.turns[0].prompt_ids, ep.turns[0].completion_ids])
        assert np.array_equal(ep.turns[1].prompt_ids[: head.size], head)


def test_stream_and_non_stream_capture_identical(serve, renderer, tiny_engine):
    """Same seeded request on the tiny HF model: streamed and non-streamed records match."""
    messages = [SYSTEM, {"role": "user", "content": "You are in room 1 of 4. Admissible actions: go east, look"}]
    with serve(tiny_engine) as proxy:
        turns, texts = [], []
        for stream in (False, True):
            h = proxy.create_episode()
            client = openai.OpenAI(base_url=h.base_url, api_key=h.api_key, max_retries=0)
            kw = dict(model="policy", messages=messages, max_tokens=12, temperature=1.0, seed=1234,
                      extra_body={"return_token_ids": True})
            if stream:
                chunks = list(client.chat.completions.create(stream=True, **kw))
                texts.append("".join(c.choices[0].delta.content or "" for c in chunks if c.choices))
                streamed_ids = [i for c in chunks if c.choices for i in (c.choices[0].model_extra or {}).get("token_ids", [])]
            else:
                out = client.chat.completions.create(**kw)
                texts.append(out.choices[0].message.content)
                returned_ids = out.choices[0].model_extra["token_ids"]
            turns.append(proxy.close_episode(h.episode_id).turns[0])
    a, b = turns
    assert texts[0] == texts[1]
    assert np.array_equal(a.prompt_ids, b.prompt_ids) and np.array_equal(a.completion_ids, b.completion_ids)
    # the second request starts from the engine's prefix KV cache: equal within float rounding, not bit for bit
    np.testing.assert_allclose(a.completion_logprobs, b.completion_logprobs, rtol=0, atol=1e-5)
    assert a.completion_ids.size > 0
    assert returned_ids == a.completion_ids.tolist() == streamed_ids
    assert a.info["sampling"] == b.info["sampling"] == {"temperature": 1.0, "top_p": 1.0, "max_tokens": 12,
                                                         "seed": 1234, "greedy": False}


def test_tool_calls_pass_through_and_continue(serve, renderer, reply_ids):
    call_text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    engine = ScriptedEngine([reply_ids(call_text), reply_ids("It is sunny.")], eos_token_id=renderer.eos_token_id)
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                               "parameters": {"type": "object",
                                                              "properties": {"city": {"type": "string"}}}}}]
    with serve(engine) as proxy:
        h = proxy.create_episode()
        client = openai.OpenAI(base_url=h.base_url, api_key=h.api_key, max_retries=0)
        messages = [SYSTEM, {"role": "user", "content": "Weather in Paris?"}]
        out = client.chat.completions.create(model="policy", messages=messages, tools=tools)
        choice = out.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        (tc,) = choice.message.tool_calls
        assert tc.function.name == "get_weather" and json.loads(tc.function.arguments) == {"city": "Paris"}
        messages += [_msg(out), {"role": "tool", "tool_call_id": tc.id, "content": "sunny"}]
        chunks = list(client.chat.completions.create(model="policy", messages=messages, tools=tools, stream=True))
        ep = proxy.close_episode(h.episode_id)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "It is sunny."
    assert "get_weather" in renderer.tokenizer.decode(ep.turns[0].prompt_ids.tolist())  # tools in the prompt
    assert ep.turns[0].completion_ids.tolist() == reply_ids(call_text)
    t1 = ep.turns[1]
    assert t1.info["prompt_source"] == "tito" and t1.info["segment"] == 0 and t1.info["forks"] == 0
    assert t1.observation == "sunny"


def test_stream_tool_call_delta(serve, renderer, reply_ids):
    call_text = '<tool_call>\n{"name": "look", "arguments": {}}\n</tool_call>'
    engine = ScriptedEngine([reply_ids(call_text)], eos_token_id=renderer.eos_token_id)
    tools = [{"type": "function", "function": {"name": "look", "parameters": {"type": "object", "properties": {}}}}]
    with serve(engine) as proxy:
        h = proxy.create_episode()
        client = openai.OpenAI(base_url=h.base_url, api_key=h.api_key, max_retries=0)
        chunks = list(client.chat.completions.create(model="p", messages=[SYSTEM, {"role": "user", "content": "hi"}],
                                                     tools=tools, stream=True))
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert [c.function.name for c in calls] == ["look"] and calls[0].id.startswith("call_")
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_completions_route_token_ids_verbatim(serve, renderer, reply_ids):
    engine = ScriptedEngine([reply_ids(" world")], eos_token_id=renderer.eos_token_id)
    with serve(engine) as proxy:
        h = proxy.create_episode()
        client = openai.OpenAI(base_url=h.base_url, api_key=h.api_key, max_retries=0)
        out = client.completions.create(model="policy", prompt=[72, 101, 108], max_tokens=8)
        out2 = client.completions.create(model="policy", prompt="hello", max_tokens=8)
        models = client.models.list()
        ep = proxy.close_episode(h.episode_id)
    assert out.choices[0].text == " world" and out2.choices[0].text == " world"
    assert ep.turns[0].prompt_ids.tolist() == [72, 101, 108]
    assert ep.turns[1].prompt_ids.tolist() == renderer.encode("hello").tolist()
    assert ep.turns[1].info["fork"] is True and ep.turns[1].info["segment"] == 1  # not an extension of call 0
    assert [m.id for m in models.data] == ["policy"]


@pytest.mark.parametrize("route", ["path", "bearer"])
def test_key_in_path_or_as_api_key(serve, renderer, reply_ids, route):
    engine = ScriptedEngine([reply_ids("look")], eos_token_id=renderer.eos_token_id)
    with serve(engine) as proxy:
        h = proxy.create_episode()
        base = h.base_url if route == "path" else f"{proxy.url}/v1"
        client = openai.OpenAI(base_url=base, api_key=h.api_key, max_retries=0)
        out = client.chat.completions.create(model="p", messages=[{"role": "user", "content": "hi"}])
        assert out.choices[0].message.content == "look"
        assert len(proxy.close_episode(h.episode_id).turns) == 1

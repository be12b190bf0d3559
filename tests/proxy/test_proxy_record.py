"""When a call is recorded: the turn exists (and ``list_episodes`` counts it) as soon as the
client has the reply, streamed or not, even while the drift metric is still being measured;
a drift failure never loses the turn; a reply that fails to go out after the turn was
recorded becomes an aborted, non-trainable turn and leaves the thread where it was."""

from __future__ import annotations

import asyncio
import logging
import time

import numpy as np
import openai
import pytest

from agentrl.llm.scripted import ScriptedEngine
from agentrl.proxy import calls as calls_mod

SYSTEM = {"role": "system", "content": "You play a text game."}


@pytest.fixture
def slow_drift(monkeypatch):
    """The drift measurement takes 0.3 s (as a long conversation's re-encode might)."""
    real = calls_mod.drift_of

    def slow(*a, **kw):
        time.sleep(0.3)
        return real(*a, **kw)
    monkeypatch.setattr(calls_mod, "drift_of", slow)


def _ask(client, messages, stream: bool) -> dict:
    if not stream:
        return client.chat.completions.create(model="p", messages=messages).choices[0].message.model_dump(
            exclude_none=True)
    chunks = list(client.chat.completions.create(model="p", messages=messages, stream=True))
    assert chunks[-1].choices[0].finish_reason == "stop"
    return {"role": "assistant", "content": "".join(c.choices[0].delta.content or "" for c in chunks)}


@pytest.mark.parametrize("stream", [False, True])
def test_turn_exists_when_the_reply_arrives(serve, renderer, reply_ids, slow_drift, stream):
    replies = [reply_ids("go east"), reply_ids("take key"), reply_ids("open door")]
    engine = ScriptedEngine(replies, eos_token_id=renderer.eos_token_id)
    with serve(engine) as proxy:
        h = proxy.create_episode()
        client = openai.OpenAI(base_url=h.base_url, api_key=h.api_key, max_retries=0)
        messages = [SYSTEM, {"role": "user", "content": "Room 1."}]
        for k in range(3):
            reply = _ask(client, messages, stream)
            proxy.set_reward(h.episode_id, float(k + 1), turn=k)  # at once, as the trainer would
            assert [s.calls for s in proxy.list_episodes()] == [k + 1]
            messages = messages + [reply, {"role": "user", "content": f"Room {k + 2}."}]
        ep = proxy.close_episode(h.episode_id)
    assert [t.reward for t in ep.turns] == [1.0, 2.0, 3.0]
    assert [t.completion_ids.tolist() for t in ep.turns] == replies
    assert [t.info["prompt_source"] for t in ep.turns] == ["rendered", "tito", "tito"]
    assert [t.info.get("token_prefix_ok") for t in ep.turns] == [None, True, True]  # measured before close


def test_drift_failure_keeps_the_turn(serve, renderer, reply_ids, monkeypatch, caplog):
    def broken(*a, **kw):
        raise RuntimeError("tokenizer exploded")
    monkeypatch.setattr(calls_mod, "drift_of", broken)
    replies = [reply_ids("go east"), reply_ids("take key"), reply_ids("open door")]
    engine = ScriptedEngine(replies, eos_token_id=renderer.eos_token_id)
    with serve(engine) as proxy, caplog.at_level(logging.WARNING, logger="agentrl.proxy.calls"):
        h = proxy.create_episode(episode_id=41)
        client = openai.OpenAI(base_url=h.base_url, api_key=h.api_key, max_retries=0)
        messages = [SYSTEM, {"role": "user", "content": "Room 1."}]
        for k in range(3):
            out = client.chat.completions.create(model="p", messages=messages)
            messages = messages + [out.choices[0].message.model_dump(exclude_none=True),
                                   {"role": "user", "content": f"Room {k + 2}."}]
        ep = proxy.close_episode(h.episode_id)
    assert [t.completion_ids.tolist() for t in ep.turns] == replies
    assert [t.info["trainable"] for t in ep.turns] == [True] * 3
    assert [t.info["prompt_source"] for t in ep.turns] == ["rendered", "tito", "tito"]  # the thread still advances
    for t in ep.turns[1:]:
        assert t.info["token_prefix_ok"] is None and "first_mismatch" not in t.info
        assert t.info["drift_error"] == "RuntimeError: tokenizer exploded"
    assert "drift_error" not in ep.turns[0].info
    failures = [r for r in caplog.records if "drift" in r.getMessage()]
    assert len(failures) == 2 and all("episode 41" in r.getMessage() for r in failures)
    assert [f"turn {t}" in r.getMessage() for r, t in zip(failures, (1, 2))] == [True, True]


def _start(proxy, h, messages, stream=False):
    from agentrl.proxy.wire import parse_chat

    session = proxy.registry.by_key(h.key)
    return session, proxy.core.start(session, parse_chat({"messages": messages, "stream": stream},
                                                         proxy.core.sampling))


def test_reply_not_sent_after_recording_becomes_aborted_turn(serve, renderer, reply_ids):
    from agentrl.proxy.app import _deliver
    from agentrl.proxy.sse import chat_body

    engine = ScriptedEngine([reply_ids("go east"), reply_ids("look")], eos_token_id=renderer.eos_token_id)
    msgs = [SYSTEM, {"role": "user", "content": "Room 1."}]
    with serve(engine) as proxy:
        h = proxy.create_episode()
        session, call = _start(proxy, h, msgs)
        asgi = _deliver(call, chat_body)
        assert len(session.episode.turns) == 1 and session.calls == 1 and session.threads  # recorded before sending

        async def send(message):
            if message["type"] == "http.response.body":
                raise OSError("connection reset")

        with pytest.raises(OSError):
            asyncio.run(asgi({"type": "http"}, None, send))
        assert not session.threads and session.n_segments == 0 and not session.busy  # rolled back, released
        proxy.set_reward(h.episode_id, 0.5, turn=0)
        # the harness retries the same request: a first call again, segment 0
        _, call2 = _start(proxy, h, msgs)
        call2.finish(True)
        ep = proxy.close_episode(h.episode_id)
    aborted, fine = ep.turns
    assert aborted.info["trainable"] is False and aborted.info["finish_reason"] == "abort" and not aborted.action_valid
    assert aborted.completion_ids.size == 0 and aborted.completion_logprobs.size == 0
    assert aborted.info["aborted_completion_tokens"] == len(reply_ids("go east")) and aborted.reward == 0.5
    assert "segment" not in aborted.info and aborted.info["fork"] is False
    assert fine.info["cause"] == "first_call" and fine.info["segment"] == 0 and fine.info["trainable"]
    assert fine.completion_ids.tolist() == reply_ids("look")
    assert np.array_equal(fine.prompt_ids, aborted.prompt_ids)


def test_stream_turn_recorded_before_final_chunk(serve, renderer, reply_ids):
    from agentrl.proxy.sse import sse_chat

    engine = ScriptedEngine([reply_ids("go east and take the key")], eos_token_id=renderer.eos_token_id)
    with serve(engine) as proxy:
        h = proxy.create_episode()
        session, call = _start(proxy, h, [SYSTEM, {"role": "user", "content": "Room 1."}], stream=True)

        async def read_to_final_chunk_then_leave():
            gen, seen = sse_chat(call), []
            async for chunk in gen:
                if b'"finish_reason":"stop"' in chunk:
                    seen.append(len(session.episode.turns))
                    break
                seen.append(len(session.episode.turns))
            await gen.aclose()  # client gone before [DONE]
            return seen

        seen = asyncio.run(read_to_final_chunk_then_leave())
        ep = proxy.close_episode(h.episode_id)
    assert seen[0] == 0 and seen[-1] == 1  # the turn exists once the final chunk is out
    (t,) = ep.turns
    assert t.info["finish_reason"] == "abort" and not t.info["trainable"] and t.completion_ids.size == 0

"""Issue 19 item 4: an identical resend through the proxy (a harness retry) is a retry of the
turn, not a third trainable turn: turn 1, turn 2, then the same turn-2 request again gives one
trainable copy of turn 2 (the retry, whose reply the harness goes on with), no fork, no new
segment, and the next call extends the retry's tokens."""

from __future__ import annotations

import numpy as np
import openai

from agentrl.llm.scripted import ScriptedEngine
from agentrl.rollout.stats import proxy_metrics
from agentrl.types import TurnTable

SYSTEM = {"role": "system", "content": "You play a text game."}


def _chat(proxy):
    h = proxy.create_episode()
    client = openai.OpenAI(base_url=h.base_url, api_key=h.api_key, max_retries=0)

    def call(messages):
        out = client.chat.completions.create(model="p", messages=messages)
        return messages + [out.choices[0].message.model_dump(exclude_none=True)]
    return h, call


def test_identical_resend_is_one_trainable_copy(serve, renderer, reply_ids):
    replies = [reply_ids("go east"), reply_ids("take key"), reply_ids("open door"), reply_ids("win")]
    with serve(ScriptedEngine(replies, eos_token_id=renderer.eos_token_id)) as proxy:
        h, call = _chat(proxy)
        m1 = call([SYSTEM, {"role": "user", "content": "obs 0"}])
        request2 = m1 + [{"role": "user", "content": "obs 1"}]
        call(request2)  # turn 2, first attempt ("take key")
        m2 = call(request2)  # the harness resends the same request: the retry ("open door")
        call(m2 + [{"role": "user", "content": "obs 2"}])
        ep = proxy.close_episode(h.episode_id)
    t0, first, retry, t3 = ep.turns
    assert first.info["superseded_by_retry"] is True and first.info["trainable"] is False
    assert first.completion_ids.size == 0 and first.info["superseded_completion_tokens"] == len(replies[1])
    assert retry.info["retry_of"] == 1 and retry.info["fork"] is False and retry.info["cause"] == "extends"
    assert retry.completion_ids.tolist() == replies[2]
    # the retry's prompt is exactly the first attempt's (both extend turn 0's tokens)
    assert np.array_equal(retry.prompt_ids, first.prompt_ids)
    head = np.concatenate([t0.prompt_ids, t0.completion_ids])
    assert np.array_equal(retry.prompt_ids[: head.size], head)
    # the next call extends the retry's reply, in the same single segment, with no fork
    head = np.concatenate([retry.prompt_ids, retry.completion_ids])
    assert np.array_equal(t3.prompt_ids[: head.size], head) and t3.info["cause"] == "extends"
    assert [t.info.get("segment") for t in (t0, retry, t3)] == [0, 0, 0] and t3.info["forks"] == 0
    # one trainable copy of turn 2 in the table and in the proxy metrics
    assert TurnTable.from_episodes([ep]).trainable.tolist() == [True, False, True, True]
    metrics = proxy_metrics([ep])
    assert metrics["proxy/forks"] == 0.0 and metrics["proxy/segments_per_episode"] == 1.0


def test_resend_of_an_older_request_is_still_a_rewrite(serve, renderer, reply_ids):
    """Only the last delivered call can be retried; resending turn 1 after turn 2 rewrites the
    history (a fork), as before."""
    engine = ScriptedEngine([reply_ids(f"step {k}") for k in range(3)], eos_token_id=renderer.eos_token_id)
    with serve(engine) as proxy:
        h, call = _chat(proxy)
        first = [SYSTEM, {"role": "user", "content": "obs 0"}]
        m = call(first)
        call(m + [{"role": "user", "content": "obs 1"}])
        call(first)
        ep = proxy.close_episode(h.episode_id)
    assert [t.info["cause"] for t in ep.turns] == ["first_call", "extends", "rewritten"]
    assert all(t.info["trainable"] for t in ep.turns) and ep.turns[2].info["fork"] is True


def test_completions_resend_is_a_retry(serve, renderer, reply_ids):
    engine = ScriptedEngine([reply_ids("a"), reply_ids("b")], eos_token_id=renderer.eos_token_id)
    with serve(engine) as proxy:
        h = proxy.create_episode()
        client = openai.OpenAI(base_url=h.base_url, api_key=h.api_key, max_retries=0)
        for _ in range(2):
            client.completions.create(model="p", prompt=[5, 6, 7], max_tokens=4)
        ep = proxy.close_episode(h.episode_id)
    assert ep.turns[0].info["superseded_by_retry"] is True and ep.turns[1].info["retry_of"] == 0
    assert ep.turns[1].completion_ids.tolist() == reply_ids("b") and ep.turns[1].info["fork"] is False


def test_retry_recorded_then_not_delivered_keeps_the_first_attempt(renderer, reply_ids):
    """A retry whose reply was recorded (``commit``, just before its last bytes) but whose
    client left before they went out changes nothing: the first attempt stays trainable with
    its ids, thread and counters (it had been superseded and stayed so, with no trainable copy
    of the turn), a reward set on it meanwhile is kept, and the next identical resend retries
    it again."""
    from agentrl.llm.base import SamplingParams
    from agentrl.proxy import RecordingProxy
    from agentrl.proxy.wire import parse_chat

    replies = [reply_ids("go east"), reply_ids("take key"), reply_ids("open door"), reply_ids("win")]
    proxy = RecordingProxy(ScriptedEngine(replies, eos_token_id=renderer.eos_token_id), renderer)
    try:
        h = proxy.create_episode()
        s, core = proxy.registry.get(h.episode_id), proxy.core

        def req(messages):
            return parse_chat({"model": "p", "messages": messages}, SamplingParams())
        m1 = [SYSTEM, {"role": "user", "content": "obs 0"}]
        core.start(s, req(m1)).finish(True)
        m2 = m1 + [{"role": "assistant", "content": "go east"}, {"role": "user", "content": "obs 1"}]
        core.start(s, req(m2)).finish(True)  # turn 1, delivered
        threads_after = dict(s.threads)
        retry = core.start(s, req(m2))
        retry.commit()  # recorded as delivered: turn 1 superseded ...
        assert s.episode.turns[1].info["superseded_by_retry"] is True
        proxy.set_reward(h.episode_id, 0.5, turn=1)
        retry.finish(False)  # ... but the client left before the last bytes
        first, aborted = s.episode.turns[1], s.episode.turns[2]
        assert first.info["trainable"] is True and "superseded_by_retry" not in first.info
        assert first.completion_ids.tolist() == replies[1] and first.reward == 0.5
        assert first.info["segment"] == 0 and first.action_valid
        assert aborted.info["finish_reason"] == "abort" and "retry_of" not in aborted.info
        assert s.threads == threads_after and (s.segment, s.n_segments, s.forks) == (0, 1, 0)
        again = core.start(s, req(m2))  # the harness resends once more: a retry of turn 1 again
        again.finish(True)
        ep = proxy.close_episode(h.episode_id)
    finally:
        proxy.core.close()
    assert again.turn.info["retry_of"] == 1 and ep.turns[1].info["superseded_by_retry"] is True
    assert TurnTable.from_episodes([ep]).trainable.tolist() == [True, False, False, True]


def test_resends_as_new_calls_keep_both_turns(serve, renderer, reply_ids):
    """``resends="new_call"`` (``rollout.harness.resends``): a stateless agent that sends the same
    request twice on purpose gets two trainable turns, neither superseded."""
    import httpx
    import pytest

    from agentrl.llm.scripted import ScriptedEngine

    engine = ScriptedEngine([reply_ids("look")], eos_token_id=renderer.eos_token_id)
    body = {"messages": [{"role": "user", "content": "You are in room 2."}]}
    for resends, trainable in (("retry", [False, True]), ("new_call", [True, True])):
        with serve(engine, resends=resends) as proxy:
            h = proxy.create_episode()
            for _ in range(2):
                assert httpx.post(f"{h.base_url}/chat/completions", json=body, timeout=30).status_code == 200
            ep = proxy.close_episode(h.episode_id)
        assert [t.info["trainable"] for t in ep.turns] == trainable and ep.status.value == "ok"
        assert ("retry_of" in ep.turns[1].info) is (resends == "retry")
    from agentrl.proxy import RecordingProxy

    with pytest.raises(ValueError, match="resends must be"):
        RecordingProxy(engine, renderer, resends="dedupe")

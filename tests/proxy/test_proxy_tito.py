"""Token-in/token-out continuation through the proxy: non-canonical splits stay verbatim
(PITFALLS P1), a history-rewriting harness forks exactly once per rewrite, side threads do
not break the main thread, strict mode refuses drift."""

from __future__ import annotations

import numpy as np
import openai
import pytest

from agentrl.llm.scripted import ScriptedEngine

SYSTEM = {"role": "system", "content": "You play a text game."}


def _split_ids(tok, text: str) -> list[int]:
    """Character-level ids of ``text``: decodes to ``text`` but re-encodes differently."""
    ids = [i for c in text for i in tok.encode(c, add_special_tokens=False)]
    assert tok.decode(ids) == text and tok.encode(text, add_special_tokens=False) != ids
    return ids


def _two_turns(serve, renderer, mode: str):
    tok = renderer.tokenizer
    reply = _split_ids(tok, "take key") + [renderer.eos_token_id]
    engine = ScriptedEngine([reply], eos_token_id=renderer.eos_token_id)
    with serve(engine, mode=mode) as proxy:
        h = proxy.create_episode()
        client = openai.OpenAI(base_url=h.base_url, api_key=h.api_key, max_retries=0)
        messages = [SYSTEM, {"role": "user", "content": "A key lies on the floor."}]
        out = client.chat.completions.create(model="p", messages=messages)
        messages += [out.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "You take it."}]
        client.chat.completions.create(model="p", messages=messages)
        return reply, proxy.close_episode(h.episode_id)


def test_non_canonical_split_kept_verbatim_one_segment(serve, renderer):
    reply, ep = _two_turns(serve, renderer, "tito")
    t0, t1 = ep.turns
    assert t0.completion_ids.tolist() == reply
    head = np.concatenate([t0.prompt_ids, t0.completion_ids])
    assert np.array_equal(t1.prompt_ids[: head.size], head)
    assert [t.info["segment"] for t in ep.turns] == [0, 0] and t1.info["forks"] == 0
    assert t1.info["token_prefix_ok"] is False  # drift measured: a re-render would change the ids
    assert t1.info["first_mismatch"] == t0.prompt_ids.size  # exactly where the sampled ids start


def test_retokenize_mode_diverges_and_reports(serve, renderer):
    reply, ep = _two_turns(serve, renderer, "retokenize")
    t0, t1 = ep.turns
    head = np.concatenate([t0.prompt_ids, t0.completion_ids])
    assert not np.array_equal(t1.prompt_ids[: head.size], head)
    assert t1.info["token_prefix_ok"] is False and t1.info["prompt_source"] == "rendered"
    assert [t.info["segment"] for t in ep.turns] == [0, 1]


def test_strict_mode_refuses_drift(serve, renderer):
    with pytest.raises(openai.BadRequestError, match="strict mode"):
        _two_turns(serve, renderer, "strict")


def test_history_rewrites_fork_once_each(serve, renderer, reply_ids):
    """Calls: 0 first, 1 extends, 2 compacts the history (rewrite), 3 extends 2,
    4 strips an earlier assistant message's text (rewrite), 5 extends 4."""
    engine = ScriptedEngine([reply_ids(f"step {k}") for k in range(6)], eos_token_id=renderer.eos_token_id)
    with serve(engine) as proxy:
        h = proxy.create_episode()
        client = openai.OpenAI(base_url=h.base_url, api_key=h.api_key, max_retries=0)

        def call(messages):
            out = client.chat.completions.create(model="p", messages=messages)
            return messages + [out.choices[0].message.model_dump(exclude_none=True)]

        m = call([SYSTEM, {"role": "user", "content": "obs 0"}])
        m = call(m + [{"role": "user", "content": "obs 1"}])
        m = call([SYSTEM, {"role": "user", "content": "Summary: two steps done."}, {"role": "user", "content": "obs 2"}])
        m = call(m + [{"role": "user", "content": "obs 3"}])
        m[3] = {"role": "assistant", "content": "step"}  # reasoning stripped from an earlier reply
        m = call(m + [{"role": "user", "content": "obs 4"}])
        call(m + [{"role": "user", "content": "obs 5"}])
        ep = proxy.close_episode(h.episode_id)
        summary = proxy.list_episodes()[0]
    assert [t.info["fork"] for t in ep.turns] == [False, False, True, False, True, False]
    assert [t.info["segment"] for t in ep.turns] == [0, 0, 1, 1, 2, 2]
    assert ep.turns[-1].info["forks"] == 2 and summary.forks == 2 and summary.segments == 3
    from agentrl.llm.chat import episode_segments

    segs = episode_segments(ep.turns)  # each segment is a consistent training sequence
    assert len(segs) == 3
    assert sum(int(s.loss_mask.sum()) for s in segs) == sum(t.completion_ids.size for t in ep.turns)


def test_side_thread_is_not_a_fork(serve, renderer, reply_ids):
    engine = ScriptedEngine([reply_ids("go east"), reply_ids("Title: game"), reply_ids("look")],
                            eos_token_id=renderer.eos_token_id)
    with serve(engine) as proxy:
        h = proxy.create_episode()
        client = openai.OpenAI(base_url=h.base_url, api_key=h.api_key, max_retries=0)
        main = [SYSTEM, {"role": "user", "content": "obs 0"}]
        out = client.chat.completions.create(model="p", messages=main)
        client.chat.completions.create(model="p", messages=[{"role": "system", "content": "Write a title."},
                                                            {"role": "user", "content": "obs 0"}])
        main += [out.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "obs 1"}]
        client.chat.completions.create(model="p", messages=main)
        ep = proxy.close_episode(h.episode_id)
    assert [t.info["thread"] for t in ep.turns] == [0, 1, 0]
    assert [t.info["fork"] for t in ep.turns] == [False, False, False] and ep.turns[-1].info["forks"] == 0
    assert ep.turns[2].info["prompt_source"] == "tito"  # the main thread still extends its own ids
    head = np.concatenate([ep.turns[0].prompt_ids, ep.turns[0].completion_ids])
    assert np.array_equal(ep.turns[2].prompt_ids[: head.size], head)

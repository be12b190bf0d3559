"""Request parameters of issue 24 item 1–2: unknown keys are ignored and recorded (refused in
strict mode; null ones never break a call), ``stop`` strings cut the reply while the recorded
ids stay the sampled ones and the next prompt extends them, ``top_logprobs`` from an engine
that has them (a 400 naming the parameter otherwise), ``n`` > 1 a documented 400."""

from __future__ import annotations

import httpx
import numpy as np
import openai
import pytest

from agentrl.llm.scripted import ScriptedEngine

SYSTEM = {"role": "system", "content": "You play a text game."}
USER = [SYSTEM, {"role": "user", "content": "Room 1."}]
NULLS = {"reasoning": None, "top_k": None, "include": None, "truncation": None}


def _post(h, body, route="chat/completions"):
    return httpx.post(f"{h.base_url}/{route}", json=body, timeout=30)


@pytest.fixture
def scripted(renderer, reply_ids):
    return ScriptedEngine([reply_ids("look around")] * 20, eos_token_id=renderer.eos_token_id)


def test_unknown_keys_are_ignored_and_recorded(serve, scripted):
    with serve(scripted) as proxy:
        h = proxy.create_episode()
        r = _post(h, {"messages": USER, **NULLS, "top_k": 40, "chat_template_kwargs": {"x": 1}})
        assert r.status_code == 200, r.text
        r = _post(h, {"prompt": "hi", "best_of": 1, "reasoning": None}, "completions")
        assert r.status_code == 200, r.text
        r = _post(h, {"messages": USER, **NULLS})
        ep = proxy.close_episode(h.episode_id)
    assert ep.turns[0].info["ignored_fields"] == ["chat_template_kwargs", "top_k"]  # null keys are not listed
    assert ep.turns[1].info["ignored_fields"] == ["best_of"] and ep.turns[1].info["dialect"] == "completions"
    assert "ignored_fields" not in ep.turns[2].info and ep.turns[2].info["dialect"] == "chat"


@pytest.mark.parametrize("kw", [{"mode": "strict"}, {"unknown_fields": "refuse"}])
def test_strict_refuses_unknown_keys_but_not_null_ones(serve, scripted, kw):
    with serve(scripted, **kw) as proxy:
        h = proxy.create_episode()
        r = _post(h, {"messages": USER, "top_k": 40, "verbosity": "low"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "top_k", r.text
        assert "unknown_fields='ignore'" in r.json()["error"]["message"]
        assert _post(h, {"messages": USER, **NULLS}).status_code == 200  # nulls and known ignored keys pass
        assert len(proxy.close_episode(h.episode_id).turns) == 1


def test_unknown_fields_value_is_checked(renderer, scripted):
    from agentrl.proxy import RecordingProxy

    with pytest.raises(ValueError, match="unknown_fields"):
        RecordingProxy(scripted, renderer, unknown_fields="maybe")


def test_n_above_one_is_a_documented_400(serve, scripted):
    with serve(scripted) as proxy:
        h = proxy.create_episode()
        r = _post(h, {"messages": USER, "n": 2})
        assert r.status_code == 400 and r.json()["error"]["param"] == "n"
        assert "group_id" in r.json()["error"]["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_stop_string_cuts_reply_records_sampled_ids_and_next_turn_extends_them(serve, renderer, reply_ids, stream):
    first = reply_ids("Thought: go east\nObservation: a room")  # the model runs on past the stop string
    engine = ScriptedEngine([first, reply_ids("done")], eos_token_id=renderer.eos_token_id)
    tok = renderer.tokenizer
    with serve(engine) as proxy:
        h = proxy.create_episode()
        client = openai.OpenAI(base_url=h.base_url, api_key=h.api_key, max_retries=0)
        kw = dict(model="p", messages=USER, stop=["\nObs", "never"])
        if stream:
            chunks = list(client.chat.completions.create(stream=True, **kw))
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            finish = chunks[-1].choices[0].finish_reason
        else:
            out = client.chat.completions.create(**kw)
            text, finish = out.choices[0].message.content, out.choices[0].finish_reason
        assert text == "Thought: go east" and finish == "stop"
        messages = [*USER, {"role": "assistant", "content": text}, {"role": "user", "content": "Room 2."}]
        assert client.chat.completions.create(model="p", messages=messages).choices[0].message.content == "done"
        ep = proxy.close_episode(h.episode_id)
    t0, t1 = ep.turns
    ids = t0.completion_ids.tolist()
    # the sampled ids up to and including the token that completed "\nObs" ("ser": past the stop string)
    assert ids == first[: len(ids)] and "\nObs" in tok.decode(ids) and "\nObs" not in tok.decode(ids[:-1])
    assert tok.decode(ids).endswith("\nObser")
    assert t0.completion_logprobs.size == len(ids) and t0.info["finish_reason"] == "stop"
    assert t0.info["stop"] == "\nObs" and t0.info["stop_cut_tokens"] == len(first) - len(ids)
    # the next prompt extends the recorded ids: prompt + completion + EOS (not sampled) + template bridge
    head = np.concatenate([t0.prompt_ids, t0.completion_ids, renderer.bridge_ids(t0.completion_ids)])
    assert renderer.bridge_ids(t0.completion_ids)[0] == renderer.eos_token_id
    assert np.array_equal(t1.prompt_ids[: head.size], head)
    assert t1.info["prompt_source"] == "tito" and t1.info["fork"] is False and t1.info["forks"] == 0
    assert t1.info["token_prefix_ok"] is True


def test_stop_unmatched_or_with_tool_calls(serve, renderer, reply_ids):
    call = '<tool_call>\n{"name": "look", "arguments": {}}\n</tool_call>'
    engine = ScriptedEngine([reply_ids("plain"), reply_ids(call + "\nObservation: x")],
                            eos_token_id=renderer.eos_token_id)
    tools = [{"type": "function", "function": {"name": "look", "parameters": {"type": "object"}}}]
    with serve(engine) as proxy:
        h = proxy.create_episode()
        r = _post(h, {"messages": USER, "stop": "\nObservation"}).json()
        assert r["choices"][0]["message"]["content"] == "plain"
        r = _post(h, {"messages": [SYSTEM, {"role": "user", "content": "x"}], "stop": ["\nObservation"],
                      "tools": tools}).json()
        ep = proxy.close_episode(h.episode_id)
    assert r["choices"][0]["finish_reason"] == "tool_calls"
    assert r["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "look"
    assert "stop" not in ep.turns[0].info and ep.turns[0].completion_ids.tolist() == reply_ids("plain")
    assert ep.turns[1].info["stop"] == "\nObservation"


def test_top_logprobs_from_the_hf_engine(serve, tiny_engine):
    with serve(tiny_engine) as proxy:
        h = proxy.create_episode()
        r = _post(h, {"messages": USER, "max_tokens": 6, "temperature": 0, "logprobs": True, "top_logprobs": 3})
        assert r.status_code == 200, r.text
        items = r.json()["choices"][0]["logprobs"]["content"]
        c = _post(h, {"prompt": "Room", "max_tokens": 4, "temperature": 0, "logprobs": 2}, "completions").json()
        ep = proxy.close_episode(h.episode_id)
    turn = ep.turns[0]
    assert len(items) == turn.completion_ids.size > 0
    for item, lp in zip(items, turn.completion_logprobs):
        tops = item["top_logprobs"]
        assert len(tops) == 3 and [t["logprob"] for t in tops] == sorted((t["logprob"] for t in tops), reverse=True)
        assert tops[0]["token"] == item["token"] and tops[0]["logprob"] == pytest.approx(float(lp), abs=1e-5)  # greedy
    tops = c["choices"][0]["logprobs"]["top_logprobs"]
    assert len(tops) == ep.turns[1].completion_ids.size and all(len(d) == 2 for d in tops)


def test_top_logprobs_without_engine_support_is_a_400(serve, scripted):
    with serve(scripted) as proxy:
        h = proxy.create_episode()
        r = _post(h, {"messages": USER, "logprobs": True, "top_logprobs": 2})
        assert r.status_code == 400 and r.json()["error"]["param"] == "top_logprobs"
        assert "ScriptedEngine" in r.json()["error"]["message"]
        r = _post(h, {"prompt": "hi", "logprobs": 3}, "completions")
        assert r.status_code == 400 and r.json()["error"]["param"] == "logprobs"
        assert _post(h, {"messages": USER, "logprobs": True, "top_logprobs": 0}).status_code == 200
        proxy.close_episode(h.episode_id)

"""SamplingParams, ScriptedEngine and OpenAIHTTPEngine (against an httpx MockTransport server)."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from agentrl.llm.base import Completion, LLMClient, SamplingParams, clamp_max_tokens
from agentrl.llm.openai_http import OpenAIHTTPEngine
from agentrl.llm.scripted import ScriptedEngine


@pytest.mark.parametrize("kw, msg", [({"temperature": 0}, "temperature"), ({"top_p": 0}, "top_p"),
                                     ({"max_tokens": 0}, "max_tokens")])
def test_sampling_params_validation(kw, msg):
    with pytest.raises(ValueError, match=msg):
        SamplingParams(**kw)


def test_clamp_and_completion_shapes():
    assert clamp_max_tokens(10, 50, 32) == 22
    assert clamp_max_tokens(10, 5, 32) == 5
    with pytest.raises(ValueError, match="no room"):
        clamp_max_tokens(32, 5, 32)
    with pytest.raises(ValueError, match="2 logprobs for 3 tokens"):
        Completion([1, 2, 3], [0.0, 0.0], "stop")


def test_scripted_engine_cuts_at_stop_and_budget():
    eng = ScriptedEngine([[5, 6, 2, 7], [8, 9, 10]], eos_token_id=2, max_context=8)
    assert isinstance(eng, LLMClient)
    a, b = eng.generate([[1, 1], [1]], SamplingParams(max_tokens=10))
    np.testing.assert_array_equal(a.token_ids, [5, 6, 2])
    assert a.finish_reason == "stop" and b.finish_reason == "length"
    np.testing.assert_array_equal(b.token_ids, [8, 9, 10])
    (c,) = eng.generate([[1] * 6], SamplingParams(max_tokens=10, stop_token_ids=(6,)))
    np.testing.assert_array_equal(c.token_ids, [5, 6])  # cycled script, stop id 6 included
    (d,) = eng.generate([[1] * 6], SamplingParams(max_tokens=10))
    np.testing.assert_array_equal(d.token_ids, [8, 9])  # context 8 - prompt 6 = 2 tokens
    assert eng.calls == 4 and len(eng.prompts) == 4


class FakeVLLM:
    """A tiny OpenAI-compatible server: echoes prompt ids + 1 as the completion (vLLM fields)."""

    def __init__(self, token_ids: bool = True) -> None:
        self.token_ids, self.requests = token_ids, []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else {}
        self.requests.append((request.url.path, dict(request.url.params), body))
        if request.url.path != "/v1/completions":
            return httpx.Response(200, json={})
        choices = []
        for i, prompt in enumerate(body["prompt"]):
            if isinstance(prompt, str):
                return httpx.Response(400, json={"error": "text prompts not expected"})
            ids = [t + 1 for t in prompt][: body["max_tokens"]]
            stop = body["stop_token_ids"][0]
            reason = "length"
            if len(ids) < body["max_tokens"]:
                ids, reason = ids + [stop], "stop"
            ch = {"index": i, "text": " ".join(map(str, ids)), "finish_reason": reason}
            if self.token_ids:
                ch["token_ids"] = ids
                ch["logprobs"] = {"token_logprobs": [-0.25 * (k + 1) for k in range(len(ids))]}
            choices.append(ch)
        return httpx.Response(200, json={"choices": choices[::-1]})  # out of order on purpose


def test_http_engine_token_in_token_out():
    server = FakeVLLM()
    eng = OpenAIHTTPEngine("http://fake", "m", eos_token_id=2, max_context=64, transport=httpx.MockTransport(server))
    a, b = eng.generate([[10, 11], [20, 21, 22, 23, 24]], SamplingParams(max_tokens=4, seed=9))
    np.testing.assert_array_equal(a.token_ids, [11, 12, 2])
    np.testing.assert_allclose(a.logprobs, [-0.25, -0.5, -0.75])
    assert a.finish_reason == "stop" and b.finish_reason == "length" and a.token_faithful
    np.testing.assert_array_equal(b.token_ids, [21, 22, 23, 24])
    _, _, body = server.requests[0]
    assert body["prompt"] == [[10, 11], [20, 21, 22, 23, 24]] and body["return_token_ids"] is True
    assert body["logprobs"] == 0 and body["seed"] == 9 and body["stop_token_ids"] == [2]
    with pytest.raises(ValueError, match="hidden"):
        eng.generate([[1]], SamplingParams(), return_hidden=True)


def test_http_engine_text_only_is_flagged_not_faithful():
    class Tok:
        def encode(self, text, add_special_tokens=False):
            return [int(w) for w in text.split()]

    server = FakeVLLM(token_ids=False)
    eng = OpenAIHTTPEngine("http://fake", "m", eos_token_id=2, max_context=64, tokenizer=Tok(),
                           transport=httpx.MockTransport(server))
    (c,) = eng.generate([[4, 5]], SamplingParams(max_tokens=8))
    assert not c.token_faithful and not eng.token_faithful and c.logprobs.size == 0
    np.testing.assert_array_equal(c.token_ids, [5, 6, 2])  # re-encoded text, stop id not doubled
    eng2 = OpenAIHTTPEngine("http://fake", "m", eos_token_id=2, max_context=64, transport=httpx.MockTransport(server))
    with pytest.raises(RuntimeError, match="text only"):
        eng2.generate([[4, 5]], SamplingParams(max_tokens=8))


def test_http_engine_weight_update_route_sequence(tmp_path):
    server = FakeVLLM()
    eng = OpenAIHTTPEngine("http://fake/", "m", eos_token_id=2, max_context=64, transport=httpx.MockTransport(server))
    eng.update_weights(tmp_path, version=7)
    paths = [(p, q.get("mode")) for p, q, _ in server.requests]
    assert paths == [("/pause", "wait"), ("/collective_rpc", None), ("/update_weight_version", None),
                     ("/reset_prefix_cache", None), ("/resume", None)]
    assert server.requests[1][2] == {"method": "reload_weights", "kwargs": {"weights_path": str(tmp_path)}}
    assert server.requests[2][2] == {"new_version": "7"} and eng.policy_version == 7
    with pytest.raises(TypeError, match="path"):
        eng.update_weights({"w": 1}, version=8)


def test_http_errors_name_the_status():
    eng = OpenAIHTTPEngine("http://fake", "m", eos_token_id=2, max_context=64,
                           transport=httpx.MockTransport(lambda r: httpx.Response(503, text="overloaded")))
    with pytest.raises(RuntimeError, match="HTTP 503: overloaded"):
        eng.generate([[1]], SamplingParams(max_tokens=2))


def test_http_engine_gives_each_prompt_its_own_context_room():
    server = FakeVLLM()
    eng = OpenAIHTTPEngine("http://fake", "m", eos_token_id=2, max_context=12, transport=httpx.MockTransport(server))
    short, long_ = [10, 11], list(range(20, 29))  # 2 tokens: room for 6 (max_tokens); 9 tokens: room for 3
    a, b = eng.generate([short, long_], SamplingParams(max_tokens=6, seed=1))
    assert sorted(body["max_tokens"] for _, _, body in server.requests) == [3, 6]  # one request per budget
    np.testing.assert_array_equal(a.token_ids, [11, 12, 2])  # not cut to the long prompt's 3 tokens
    assert b.token_ids.size == 3 and b.finish_reason == "length"


def test_context_batches_keep_every_prompt_within_the_context():
    from agentrl.llm.base import context_batches

    assert context_batches([2, 390], [48, 10], 400) == [[0], [1]]
    assert context_batches([5, 7, 3], [8, 8, 8], 400) == [[0, 1, 2]]  # all fit: one batch, order kept
    lengths, ctx, mt = [3, 390, 12, 380, 395, 40], 400, 48
    budgets = [clamp_max_tokens(n, mt, ctx) for n in lengths]
    batches = context_batches(lengths, budgets, ctx)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert all(max(lengths[i] for i in b) + max(budgets[i] for i in b) <= ctx for b in batches)

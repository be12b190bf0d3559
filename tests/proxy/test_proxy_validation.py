"""Request values of the wrong type or range are 400s that name the parameter (issue 20 item 4):
token ids outside the vocabulary, ``stream_options`` that is not an object, ``"stream": "no"``;
``max_completion_tokens`` is the chat alias of ``max_tokens`` (both given and different: 400)."""

from __future__ import annotations

import httpx
import pytest

from agentrl.llm.scripted import ScriptedEngine

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def scripted(renderer, reply_ids):
    return ScriptedEngine([reply_ids("look around")] * 20, eos_token_id=renderer.eos_token_id)


@pytest.mark.parametrize("route, body, param, words", [
    ("completions", {"prompt": [1, 2, 10**6]}, "prompt", "outside the vocabulary"),
    ("completions", {"prompt": [1, -5]}, "prompt", "outside the vocabulary"),
    ("completions", {"prompt": [1, 2**40]}, "prompt", "outside the vocabulary"),
    ("completions", {"prompt": "hi", "stream_options": [1]}, "stream_options", "object"),
    ("chat/completions", {"messages": USER, "stream_options": [1]}, "stream_options", "object"),
    ("chat/completions", {"messages": USER, "stream": True, "stream_options": {"include_usage": "yes"}},
     "stream_options.include_usage", "true or false"),
    ("chat/completions", {"messages": USER, "stream": "no"}, "stream", "true or false"),
    ("completions", {"prompt": "hi", "stream": "no"}, "stream", "true or false"),
    ("chat/completions", {"messages": USER, "logprobs": "yes"}, "logprobs", "true or false"),
    ("chat/completions", {"messages": USER, "return_token_ids": 1}, "return_token_ids", "true or false"),
    ("completions", {"prompt": "hi", "logprobs": "1"}, "logprobs", "integer"),
    ("chat/completions", {"messages": USER, "max_completion_tokens": 2, "max_tokens": 5}, "max_completion_tokens",
     "differ"),
    ("chat/completions", {"messages": USER, "max_completion_tokens": 0}, "max_completion_tokens", ">= 1"),
    ("chat/completions", {"messages": USER, "max_tokens": 0}, "max_tokens", ">= 1"),
    # nested nulls / objects were joined into the prompt as the text "None" / a dict's repr
    ("chat/completions", {"messages": [{"role": "user", "content": [{"type": "text", "text": None}]}]},
     "messages[0].content", "must be a string"),
    ("chat/completions", {"messages": [{"role": "user", "content": [{"type": "text", "text": {"a": 1}}]}]},
     "messages[0].content", "must be a string"),
    ("completions", {"prompt": [""]}, "prompt", "non-empty"),  # was an empty prompt → the engine's 500
    ("chat/completions", {"messages": USER, "temperature": 1e-308}, "temperature", "0 (greedy) or >="),  # inf logits
])
def test_bad_values_are_400_naming_the_parameter(serve, scripted, route, body, param, words):
    with serve(scripted) as proxy:
        h = proxy.create_episode()
        r = httpx.post(f"{h.base_url}/{route}", json=body, timeout=30)
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error" and err["param"] == param and words in err["message"], err
        assert proxy.close_episode(h.episode_id).turns == []


def test_max_completion_tokens_is_honoured(serve, scripted):
    with serve(scripted) as proxy:
        h = proxy.create_episode()
        for body in ({"max_completion_tokens": 1}, {"max_completion_tokens": 2, "max_tokens": 2}, {"max_tokens": 1}):
            r = httpx.post(f"{h.base_url}/chat/completions", json={"messages": USER, **body}, timeout=30)
            assert r.status_code == 200, r.text
            out = r.json()
            n = body.get("max_completion_tokens", body.get("max_tokens"))
            assert out["usage"]["completion_tokens"] == n and out["choices"][0]["finish_reason"] == "length"
        turns = proxy.close_episode(h.episode_id).turns
        assert [t.info["sampling"]["max_tokens"] for t in turns] == [1, 2, 1]


def test_valid_token_ids_and_flags_still_work(serve, scripted, renderer):
    vocab = len(renderer.tokenizer)
    with serve(scripted) as proxy:
        h = proxy.create_episode()
        r = httpx.post(f"{h.base_url}/completions", json={"prompt": [0, 1, vocab - 1], "stream": False,
                                                          "stream_options": None, "logprobs": 1}, timeout=30)
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/json"), r.text
        r = httpx.post(f"{h.base_url}/chat/completions", json={"messages": USER, "stream": False, "logprobs": False},
                       timeout=30)
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
        proxy.close_episode(h.episode_id)


class _Refusing(ScriptedEngine):
    """Raises ``exc`` from ``generate`` (an engine refusing a prompt or failing)."""

    def __init__(self, exc, **kw):
        super().__init__([[1]], **kw)
        self.exc = exc

    def generate(self, prompts, sampling):
        raise self.exc


@pytest.mark.parametrize("exc, status, kind", [(ValueError("prompt 0 is too long"), 400, "invalid_request_error"),
                                               (RuntimeError("CUDA error"), 503, "server_error")])
def test_engine_refusals_are_400_or_503_not_500(serve, renderer, exc, status, kind):
    """The event-loop path maps an engine's ValueError / RuntimeError as the threaded one does
    (it raised them from the awaited future before the mapping: a bare 500)."""
    with serve(_Refusing(exc, eos_token_id=renderer.eos_token_id)) as proxy:
        h = proxy.create_episode()
        r = httpx.post(f"{h.base_url}/chat/completions", json={"messages": USER}, timeout=30)
        assert r.status_code == status, r.text
        assert r.json()["error"]["type"] == kind and str(exc) in r.json()["error"]["message"]
        r = httpx.post(f"{h.base_url}/chat/completions", json={"messages": USER}, timeout=30)
        assert r.status_code == status  # the episode was released
        assert proxy.close_episode(h.episode_id).turns == []


def test_a_null_tool_call_id_is_no_id():
    from agentrl.llm.base import SamplingParams
    from agentrl.proxy.wire import parse_chat

    call = {"id": None, "type": "function", "function": {"name": "f", "arguments": "{}"}}
    req = parse_chat({"messages": [*USER, {"role": "assistant", "content": None, "tool_calls": [call]}]},
                     SamplingParams())
    assert req.messages[1].tool_calls[0].id == ""  # was the text "None"

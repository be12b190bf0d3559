"""Issue 23 item 10: the HTTP engine retries transient failures (connection refused/reset,
502/503/504/429) with bounded backoff, and a rollout through it survives them; a client error
(400) or exhausted retries still raise."""

from __future__ import annotations

import httpx
import pytest

from agentrl.llm.base import SamplingParams
from agentrl.llm.openai_http import OpenAIHTTPEngine

from test_engines_light import FakeVLLM


class Flaky:
    """FakeVLLM behind a server that first fails with the given statuses / "reset"s."""

    def __init__(self, failures: list) -> None:
        self.server, self.failures, self.attempts = FakeVLLM(), list(failures), 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.attempts += 1
        if self.failures:
            f = self.failures.pop(0)
            if f == "reset":
                raise httpx.ReadError("connection reset by peer", request=request)
            if f == "refused":
                raise httpx.ConnectError("connection refused", request=request)
            return httpx.Response(f, text=f"status {f}")
        return self.server(request)


def _engine(flaky: Flaky, retries: int = 3, max_context: int = 64) -> OpenAIHTTPEngine:
    return OpenAIHTTPEngine("http://fake", "m", eos_token_id=2, max_context=max_context, retries=retries, backoff_s=0.0,
                            transport=httpx.MockTransport(flaky))


def test_transient_failures_are_retried_then_succeed():
    flaky = Flaky([503, "reset", 502])
    (c,) = _engine(flaky).generate([[10, 11]], SamplingParams(max_tokens=4))
    assert c.token_ids.tolist() == [11, 12, 2] and flaky.attempts == 4


@pytest.mark.parametrize("failures, err", [([400], RuntimeError), (["refused"] * 4, httpx.ConnectError),
                                           ([503] * 4, RuntimeError)])
def test_client_errors_and_exhausted_retries_raise(failures, err):
    flaky = Flaky(failures)
    with pytest.raises(err):
        _engine(flaky).generate([[10, 11]], SamplingParams(max_tokens=4))
    assert flaky.attempts == (1 if failures == [400] else 4)  # 400 is not retried; 1 + 3 retries


def test_bad_retry_settings_are_refused():
    with pytest.raises(ValueError, match="retries"):
        OpenAIHTTPEngine("http://fake", "m", eos_token_id=2, max_context=64, retries=-1)


def test_a_rollout_survives_a_transient_failure(tiny_tokenizer):
    from agentrl.llm.chat import ChatRenderer
    from agentrl.rollout.agent_loop import LoopConfig
    from agentrl.rollout.collector import CollectConfig, collect

    flaky = Flaky([503, "reset"])
    cfg = CollectConfig(env_id="agentrl/Toy-v0", n_groups=1, group_size=2, seed=3, num_workers=1, progress=False,
                        loop=LoopConfig(context="window", max_turns=3, action_format="whole"),
                        sampling=SamplingParams(max_tokens=4, seed=1))
    episodes = collect(_engine(flaky, max_context=4096), ChatRenderer(tiny_tokenizer), cfg)
    assert len(episodes) == 2 and all(ep.status.value == "ok" for ep in episodes) and flaky.attempts >= 3
    assert all(t.completion_ids.size for ep in episodes for t in ep.turns)

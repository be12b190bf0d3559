"""One policy version per turn, and no broken episode closed ok (issue 53).

A weight update through ``RecordingProxy.update_weights`` waits for the call in flight, holds
(or answers 429 with ``Retry-After``) the calls that arrive meanwhile, and every turn records the
version of the weights that produced it — checked with a real HF model whose recorded logprobs
must equal the recompute under that version's weights and no other. A call the proxy answered
with an error, a reply the client did not take in full, or a generation that straddled a
direct weight load closes the episode ``aborted`` with its cause, even when the harness
retried and went on; a 429 during an update does not."""

from __future__ import annotations

import threading
import time

import httpx
import numpy as np
import openai
import pytest

from agentrl.llm.scripted import ScriptedEngine
from agentrl.types import EpisodeStatus

USER = [{"role": "user", "content": "hi"}]


class GatedEngine(ScriptedEngine):
    """Scripted engine whose ``generate`` waits on ``release`` (once ``hold`` is set) and which
    records whether a weight load ever ran while a generation was in progress."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.hold, self.release, self.started = False, threading.Event(), threading.Event()
        self.active, self.overlaps, self.loads = 0, 0, []

    def generate(self, prompts, sampling, **kw):
        self.active += 1
        try:
            self.started.set()
            if self.hold:
                assert self.release.wait(10)
            return super().generate(prompts, sampling, **kw)
        finally:
            self.active -= 1

    def update_weights(self, source, version):
        self.overlaps += self.active > 0
        self.loads.append(version)
        super().update_weights(source, version)


def _chat(url, timeout=10.0):
    return httpx.post(f"{url}/chat/completions", json={"messages": USER}, timeout=timeout)


def test_update_weights_waits_for_the_call_in_flight_and_holds_the_next(serve, renderer, reply_ids):
    engine = GatedEngine([reply_ids("look")], eos_token_id=renderer.eos_token_id)
    with serve(engine) as proxy:
        h = proxy.create_episode()
        assert _chat(h.base_url).status_code == 200  # turn 0 under version 0
        engine.hold = True
        engine.started.clear()
        first = threading.Thread(target=_chat, args=(h.base_url,))
        first.start()
        assert engine.started.wait(10)
        sync = threading.Thread(target=proxy.update_weights, args=(None, 1))
        sync.start()
        time.sleep(0.3)
        assert sync.is_alive() and engine.loads == []  # the update waits for the call in flight
        h2 = proxy.create_episode()
        late = {}
        held = threading.Thread(target=lambda: late.update(r=_chat(h2.base_url)))
        held.start()
        engine.release.set()
        first.join(10), sync.join(10), held.join(10)
        eps = [proxy.close_episode(h.episode_id), proxy.close_episode(h2.episode_id)]
    assert engine.loads == [1] and engine.overlaps == 0 and late["r"].status_code == 200
    assert [t.policy_version for t in eps[0].turns] == [0, 0] and [t.policy_version for t in eps[1].turns] == [1]
    assert all(t.info["policy_version_start"] == t.policy_version for e in eps for t in e.turns)
    assert all(e.status == EpisodeStatus.OK for e in eps)


def test_reject_mode_answers_429_with_retry_after_and_the_sdk_retry_succeeds(serve, scripted_look):
    with serve(scripted_look, while_paused="reject", retry_after_s=0.5) as proxy:
        h = proxy.create_episode()
        proxy.pause()
        r = _chat(h.base_url)
        assert r.status_code == 429 and r.headers["retry-after"] == "1"
        assert r.json()["error"]["type"] == "rate_limit_error" and "being updated" in r.json()["error"]["message"]
        threading.Timer(0.3, lambda: (scripted_look.update_weights(None, version=1), proxy.resume())).start()
        client = openai.OpenAI(base_url=h.base_url, api_key=h.api_key, max_retries=3)  # honours Retry-After
        out = client.chat.completions.create(model="policy", messages=USER)
        ep = proxy.close_episode(h.episode_id)
    assert out.choices[0].message.content == "look"
    assert ep.status == EpisodeStatus.OK and [t.policy_version for t in ep.turns] == [1]  # a 429 breaks nothing


def test_a_call_answered_with_an_error_aborts_the_episode_even_after_a_good_retry(serve, renderer, reply_ids):
    class FailOnce(ScriptedEngine):
        def generate(self, prompts, sampling, **kw):
            if self.calls == 0 and not getattr(self, "failed", False):
                self.failed = True
                raise RuntimeError("engine worker died")
            return super().generate(prompts, sampling, **kw)

    engine = FailOnce([reply_ids("look")], eos_token_id=renderer.eos_token_id)
    with serve(engine) as proxy:
        h, clean = proxy.create_episode(), proxy.create_episode()
        client = openai.OpenAI(base_url=h.base_url, api_key=h.api_key, max_retries=0)
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(model="policy", messages=USER)
        client.chat.completions.create(model="policy", messages=USER)  # the harness retries: 200
        assert _chat(clean.base_url).status_code == 200
        ep, ok = proxy.close_episode(h.episode_id), proxy.close_episode(clean.episode_id)
    assert ep.status == EpisodeStatus.ABORTED and ep.cause == "model_call_failed"
    assert "answered 503" in ep.error and "engine worker died" in ep.error and len(ep.turns) == 1
    assert ok.status == EpisodeStatus.OK and ok.cause == ""


def test_a_harness_exit_after_a_lost_call_names_the_lost_call_first(serve, renderer, reply_ids):
    engine = ScriptedEngine([reply_ids("look")], eos_token_id=renderer.eos_token_id, max_context=8)
    with serve(engine) as proxy:
        h = proxy.create_episode()
        assert _chat(h.base_url).status_code == 400  # over the context
        ep = proxy.close_episode(h.episode_id, EpisodeStatus.ABORTED, "[harness_exit] harness exited with code 1")
    assert ep.cause == "model_call_failed" and ep.error.endswith("then: [harness_exit] harness exited with code 1")


def test_weights_loaded_behind_the_proxys_back_mid_call_abort_the_turn(serve, renderer, reply_ids):
    engine = GatedEngine([reply_ids("look")], eos_token_id=renderer.eos_token_id)
    engine.hold = True
    with serve(engine) as proxy:
        h = proxy.create_episode()
        th = threading.Thread(target=_chat, args=(h.base_url,))
        th.start()
        assert engine.started.wait(10)
        engine.policy_version = 5  # an update that bypassed RecordingProxy.update_weights
        engine.release.set()
        th.join(10)
        ep = proxy.close_episode(h.episode_id)
    (t,) = ep.turns
    assert t.info["trainable"] is False and t.completion_ids.size == 0 and t.info["policy_version_start"] == 0
    assert ep.status == EpisodeStatus.ABORTED and ep.cause == "mixed_versions" and "from policy version 0 to 5" in ep.error


def test_client_gone_mid_call_aborts_the_episode_with_its_cause(serve, renderer, reply_ids):
    engine = GatedEngine([reply_ids("look")], eos_token_id=renderer.eos_token_id)
    engine.hold = True
    with serve(engine) as proxy:
        h = proxy.create_episode()
        with pytest.raises(httpx.ReadTimeout):
            _chat(h.base_url, timeout=0.3)  # the harness's own timeout
        time.sleep(0.5)  # the proxy notices the hang-up (polled every 0.25 s)
        engine.release.set()
        deadline = time.monotonic() + 10
        while proxy.list_episodes()[0].calls < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        ep = proxy.close_episode(h.episode_id)
    assert ep.status == EpisodeStatus.ABORTED and ep.cause == "client_disconnected"


def test_every_turn_carries_the_weights_that_produced_it(renderer, tiny_dir):
    """A real model: a sync between two calls of one episode; each turn's recorded logprobs
    equal the recompute under its own version's weights, and differ from the other version's."""
    import torch

    from agentrl.llm.hf import HFEngine
    from agentrl.proxy import RecordingProxy

    torch.manual_seed(0)
    engine = HFEngine.from_pretrained(tiny_dir)
    v0 = {k: v.clone() for k, v in engine.model.state_dict().items()}
    v1 = {k: v + 0.05 * torch.randn_like(v) if v.is_floating_point() else v.clone() for k, v in v0.items()}
    with RecordingProxy(engine, renderer) as proxy:
        proxy.start()
        h = proxy.create_episode()
        client = openai.OpenAI(base_url=h.base_url, api_key=h.api_key, max_retries=0)
        messages = list(USER)
        for i in range(3):
            if i == 1:
                proxy.update_weights(v1, 1)
            out = client.chat.completions.create(model="policy", messages=messages, max_tokens=6, seed=i)
            messages += [{"role": "assistant", "content": out.choices[0].message.content or ""},
                         {"role": "user", "content": "and then?"}]
        ep = proxy.close_episode(h.episode_id)
    assert [t.policy_version for t in ep.turns] == [0, 1, 1] and ep.status == EpisodeStatus.OK
    for t in ep.turns:
        gaps = {}
        for version, state in ((0, v0), (1, v1)):
            engine.update_weights(state, version)
            gaps[version] = float(np.abs(engine.score(t.prompt_ids, t.completion_ids) - t.completion_logprobs).max())
        assert gaps[t.policy_version] < 1e-4 < gaps[1 - t.policy_version], (t.t, gaps)


@pytest.fixture
def scripted_look(renderer, reply_ids):
    return ScriptedEngine([reply_ids("look")], eos_token_id=renderer.eos_token_id)

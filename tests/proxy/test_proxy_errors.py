"""Bad input and control plane: OpenAI-style 400/401/409 bodies, admin routes and rewards,
per-episode ordering, client disconnects, pause/resume around a weight update."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import numpy as np
import pytest

from agentrl.llm.scripted import ScriptedEngine
from agentrl.types import EpisodeStatus

USER = [{"role": "user", "content": "hi"}]


class SlowEngine(ScriptedEngine):
    """Scripted engine that takes ``delay`` seconds per call and logs (start, end) times."""

    def __init__(self, *a, delay: float = 0.2, **kw):
        super().__init__(*a, **kw)
        self.delay, self.spans, self.started = delay, [], threading.Event()

    def generate(self, prompts, sampling, **kw):
        self.started.set()
        t0 = time.monotonic()
        time.sleep(self.delay)
        out = super().generate(prompts, sampling, **kw)
        self.spans.append((t0, time.monotonic()))
        return out


@pytest.fixture
def scripted(renderer, reply_ids):
    return ScriptedEngine([reply_ids("look")], eos_token_id=renderer.eos_token_id)


def _post(url, body=None, *, content=None, token=None, timeout=10.0):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.post(url, json=body, content=content, headers=headers, timeout=timeout)


@pytest.mark.parametrize("body, param, words", [
    (b"{not json", None, "not valid JSON"),
    (b"[1, 2]", None, "JSON object"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "frequency_penalty": 0.5}', "frequency_penalty", "not supported"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "n": 2}', "n", "must be 1"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "stop": [1]}', "stop", "list of strings"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 50}', "top_logprobs", "between 0 and 20"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "temperature": -1}', "temperature", ">= 0"),
    (b'{"messages": []}', "messages", "non-empty"),
    (b'{"messages": [{"role": "wizard", "content": "hi"}]}', "messages[0].role", "wizard"),
    (b'{"messages": ["system"]}', "messages[0].role", "'system'"),  # not an object
    (b'{"messages": [{"role": "user", "content": "a"}, {"role": ["user"], "content": "b"}]}', "messages[1].role",
     "['user']"),  # unhashable role
    (b'{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}', "messages[0].content",
     "image_url"),
])
def test_bad_requests_get_openai_400(serve, scripted, body, param, words):
    with serve(scripted) as proxy:
        h = proxy.create_episode()
        r = httpx.post(f"{h.base_url}/chat/completions", content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 400
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error" and err["param"] == param and words in err["message"]
        assert proxy.close_episode(h.episode_id).turns == []  # nothing recorded


def test_unknown_key_401_closed_409(serve, scripted):
    with serve(scripted) as proxy:
        h = proxy.create_episode()
        r = _post(f"{proxy.url}/e/{'0' * 32}/v1/chat/completions", {"messages": USER})
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        assert _post(f"{proxy.url}/v1/chat/completions", {"messages": USER}, token="nope").status_code == 401
        assert httpx.get(f"{proxy.url}/e/{'1' * 32}/v1/models").status_code == 401
        assert _post(f"{h.base_url}/chat/completions", {"messages": USER}).status_code == 200
        proxy.close_episode(h.episode_id)
        r = _post(f"{h.base_url}/chat/completions", {"messages": USER})
        assert r.status_code == 409 and "closed" in r.json()["error"]["message"]


def test_admin_routes_and_rewards(serve, scripted):
    with serve(scripted, admin_token="s3cret") as proxy:
        admin = f"{proxy.url}/admin"
        assert _post(f"{admin}/episodes", {}).status_code == 401
        assert _post(f"{admin}/episodes", {}, token="wrong").status_code == 401
        made = [_post(f"{admin}/episodes", {"env_id": "agentrl/Toy-v0", "seed": s, "group_id": 7}, token="s3cret").json()
                for s in (0, 1)]
        for m in made:
            assert m["base_url"] == f"{proxy.url}/e/{m['key']}/v1" and m["api_key"] == m["key"]
            for _ in range(3):
                assert _post(f"{m['base_url']}/chat/completions", {"messages": USER}).status_code == 200
        a, b = made[0]["episode_id"], made[1]["episode_id"]
        assert _post(f"{admin}/episodes/{a}/reward", {"reward": 0.5, "turn": 1}, token="s3cret").status_code == 200
        assert _post(f"{admin}/episodes/{a}/reward", {"reward": 2.0}, token="s3cret").status_code == 200
        assert _post(f"{admin}/episodes/{a}/reward", {"reward": 1.0, "turn": 9}, token="s3cret").status_code == 404
        closed = _post(f"{admin}/episodes/{a}/close", {}, token="s3cret").json()
        assert closed == {"episode_id": a, "status": "ok", "turns": 3, "return": 2.5}
        listed = httpx.get(f"{admin}/episodes", headers={"Authorization": "Bearer s3cret"}).json()["episodes"]
        assert [(e["episode_id"], e["status"], e["calls"]) for e in listed] == [(a, "ok", 3), (b, "open", 3)]
        ep = proxy.close_episode(b, EpisodeStatus.ABORTED, "harness crashed")
    assert ep.status == EpisodeStatus.ABORTED and ep.return_ is None  # never scored 0 (P5)


def test_concurrent_requests_on_one_episode_never_interleave(serve, renderer, reply_ids):
    engine = SlowEngine([reply_ids("look")], eos_token_id=renderer.eos_token_id, delay=0.15)
    with serve(engine) as proxy:
        h = proxy.create_episode()
        codes = []
        threads = [threading.Thread(target=lambda: codes.append(_post(f"{h.base_url}/chat/completions",
                                                                      {"messages": USER}).status_code))
                   for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ep = proxy.close_episode(h.episode_id)
    assert codes == [200] * 4 and [t.t for t in ep.turns] == [0, 1, 2, 3]
    spans = sorted(engine.spans)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # one call at a time


def test_disconnect_during_generation_records_untrainable_turn(serve, renderer, reply_ids):
    engine = SlowEngine([reply_ids("look")], eos_token_id=renderer.eos_token_id, delay=1.0)
    with serve(engine) as proxy:
        h = proxy.create_episode()
        for stream in (False, True):
            with pytest.raises(httpx.ReadTimeout):
                _post(f"{h.base_url}/chat/completions", {"messages": USER, "stream": stream}, timeout=0.3)
        deadline = time.monotonic() + 10
        while proxy.list_episodes()[0].calls < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        engine.delay = 0.0
        ok = _post(f"{h.base_url}/chat/completions", {"messages": USER})
        ep = proxy.close_episode(h.episode_id)
    assert ok.status_code == 200
    aborted, fine = ep.turns[:2], ep.turns[2]
    for t in aborted:
        assert t.info["trainable"] is False and t.info["finish_reason"] == "abort" and "segment" not in t.info
        assert t.completion_ids.size == 0 and t.info["aborted_completion_tokens"] == len(reply_ids("look"))
    assert fine.info["trainable"] and fine.info["cause"] == "first_call" and fine.info["segment"] == 0
    from agentrl.types import TurnTable

    assert TurnTable.from_episodes([ep]).trainable.tolist() == [False, False, True]


def test_client_gone_mid_stream_records_untrainable_turn(serve, renderer, reply_ids):
    from agentrl.proxy.sse import sse_chat
    from agentrl.proxy.wire import parse_chat

    engine = ScriptedEngine([reply_ids("go east and take the key")], eos_token_id=renderer.eos_token_id)
    with serve(engine) as proxy:
        h = proxy.create_episode()
        session = proxy.registry.by_key(h.key)
        call = proxy.core.start(session, parse_chat({"messages": USER, "stream": True}, proxy.core.sampling))

        async def read_two_then_leave():
            gen = sse_chat(call)
            chunks = [await gen.__anext__(), await gen.__anext__()]
            await gen.aclose()  # what Starlette does when the client disconnects
            return chunks

        chunks = asyncio.run(read_two_then_leave())
        ep = proxy.close_episode(h.episode_id)
    assert len(chunks) == 2 and len(ep.turns) == 1
    t = ep.turns[0]
    assert t.info["finish_reason"] == "abort" and not t.info["trainable"] and t.completion_ids.size == 0


def test_pause_holds_requests_until_resume(serve, scripted):
    with serve(scripted) as proxy:
        h = proxy.create_episode()
        proxy.pause()
        result = {}
        th = threading.Thread(target=lambda: result.update(r=_post(f"{h.base_url}/chat/completions", {"messages": USER})))
        th.start()
        time.sleep(0.4)
        assert "r" not in result  # waiting, not failed
        scripted.update_weights(None, version=1)
        proxy.resume()
        th.join(10)
        ep = proxy.close_episode(h.episode_id)
    assert result["r"].status_code == 200
    (t,) = ep.turns
    assert t.policy_version == 1 and t.info["policy_version_start"] == 1


def test_pause_waits_for_call_in_flight(serve, renderer, reply_ids):
    engine = SlowEngine([reply_ids("look")], eos_token_id=renderer.eos_token_id, delay=0.5)
    with serve(engine) as proxy:
        h = proxy.create_episode()
        th = threading.Thread(target=lambda: _post(f"{h.base_url}/chat/completions", {"messages": USER}))
        th.start()
        assert engine.started.wait(10)
        t0 = time.monotonic()
        proxy.pause()  # returns only once the in-flight call is recorded
        waited = time.monotonic() - t0
        assert proxy.list_episodes()[0].calls == 1 and waited > 0.1
        proxy.resume()
        th.join(10)
        proxy.close_episode(h.episode_id)


def test_sampling_overrides_and_max_calls(serve, scripted):
    with serve(scripted) as proxy:
        h = proxy.create_episode(sampling={"temperature": 0.7}, max_calls=1)
        r = _post(f"{h.base_url}/chat/completions", {"messages": USER, "temperature": 1.5, "max_tokens": 5})
        assert r.status_code == 200
        assert _post(f"{h.base_url}/chat/completions", {"messages": USER}).status_code == 409
        (t,) = proxy.close_episode(h.episode_id).turns
        with pytest.raises(ValueError, match="unknown sampling override"):
            proxy.create_episode(sampling={"temp": 1.0})
    assert t.info["sampling"]["temperature"] == 0.7 and t.info["sampling"]["max_tokens"] == 5
    assert t.info["sampling_sent"] == {"temperature": 1.5, "max_tokens": 5}
    np.testing.assert_array_equal(t.completion_logprobs, np.full(t.completion_ids.size, -0.5, np.float32))


def test_prompt_longer_than_context_is_400(serve, renderer, reply_ids):
    engine = ScriptedEngine([reply_ids("look")], eos_token_id=renderer.eos_token_id, max_context=8)
    with serve(engine) as proxy:
        h = proxy.create_episode()
        r = _post(f"{h.base_url}/chat/completions", {"messages": USER})
        assert r.status_code == 400 and "context of 8 tokens" in r.json()["error"]["message"]
        assert engine.calls == 0 and proxy.close_episode(h.episode_id).turns == []


def test_the_proxy_caps_request_bodies_and_closes_stalled_connections(serve, scripted):
    """Issue 52: a body over the cap is answered 413 (OpenAI-style error) before the proxy parses
    it; a client that never finishes its headers is disconnected after the header deadline."""
    import socket
    from urllib.parse import urlparse

    from agentrl.serve_limits import ServeLimits

    with serve(scripted, limits=ServeLimits(max_body_bytes=2048, header_timeout_s=1.0)) as proxy:
        big = {"messages": [{"role": "user", "content": "x" * 5000}]}
        got = _post(f"{proxy.url}/v1/chat/completions", big)
        assert got.status_code == 413 and "over 2048 bytes" in got.json()["error"]["message"]
        assert _post(f"{proxy.url}/v1/chat/completions", {"messages": USER}).status_code == 401  # reaches the app
        u = urlparse(proxy.url)
        with socket.create_connection((u.hostname, u.port), timeout=10) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            s.settimeout(5.0)
            assert s.recv(1) == b""  # closed by the server

"""Recording-proxy overhead: added latency per call and throughput with concurrent harnesses.

Setup (loopback only): the tiny ChatML tokenizer (MODELS.md §2.1) and a ``ScriptedEngine``
that answers every call with the same 8 ids, so the engine itself costs microseconds and
what is measured is the proxy: HTTP + JSON, rendering (TITO continuation + drift re-render),
the engine-worker hop, the reply and the recorded turn. The proxy runs in a child process
(as in production: harness and proxy are different processes).

1. **Latency**: harness episodes of ``--turns`` chat turns (each request re-sends the growing
   history, as agent loops do), sequential, keep-alive ``httpx.Client``; ``--calls`` timed
   calls after ``--warmup``. The baseline in the same run is the engine called directly
   (``engine.generate`` on the same prompt ids). Added latency = proxy − direct, at p50 and
   p99. Reported with drift measurement on (default) and off, and through the ``openai`` SDK.
   ``proxy_core_no_http`` is the same work in-process without HTTP (the proxy's own cost);
   ``http_floor_models_route`` (``GET models`` on the same server) is the HTTP stack alone,
   for reading the numbers on a loaded machine.
2. **Throughput**: ``--harnesses`` concurrent harnesses (asyncio, one ``httpx.AsyncClient``
   connection each) each playing ``--episodes`` episodes; calls per second and latency
   percentiles under load.

Usage: ``python benchmarks/proxy.py [--calls 1000] [--harnesses 32] [--out benchmarks/results/proxy.json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

REPLY = "go east"


def _renderer():
    from transformers import AutoTokenizer

    from agentrl.llm.chat import ChatRenderer
    from agentrl.llm.tiny import tiny_model_dir

    return ChatRenderer(AutoTokenizer.from_pretrained(tiny_model_dir(Path(tempfile.gettempdir()) / "agentrl-test-cache")))


def _engine(renderer):
    from agentrl.llm.scripted import ScriptedEngine

    ids = renderer.encode(" ".join([REPLY] * 4)).tolist()[:7] + [renderer.eos_token_id]
    return ScriptedEngine([ids], eos_token_id=renderer.eos_token_id, max_context=1 << 20)


def _serve(conn, measure_drift: bool) -> None:
    """Child process: serve a proxy until the parent closes the pipe."""
    from agentrl.proxy import RecordingProxy

    r = _renderer()
    proxy = RecordingProxy(_engine(r), r, admin_token="bench", measure_drift=measure_drift, max_batch=32)
    conn.send(proxy.start())
    conn.recv()
    proxy.stop()


def _messages() -> list[dict]:
    return [{"role": "system", "content": "You are an agent playing a text game. Reply with one command."},
            {"role": "user", "content": "You are in room 1 of 5. Admissible actions: go east, look, inventory."}]


class _Harness:
    """Plays episodes: turn k re-sends the history with the replies received so far."""

    def __init__(self, turns: int) -> None:
        self.turns, self.msgs, self.k = turns, [], 0

    def next_body(self, new_key: bool) -> bytes:
        import orjson

        if new_key or self.k == 0:
            self.msgs, self.k = _messages(), 0
        return orjson.dumps({"model": "policy", "messages": self.msgs, "max_tokens": 16})

    def got(self, reply: dict) -> bool:
        """Record the reply; True when the episode is over (a new key is needed)."""
        self.k += 1
        if self.k >= self.turns:
            self.k = 0
            return True
        self.msgs = self.msgs + [reply["choices"][0]["message"], {"role": "user", "content": f"obs {self.k}"}]
        return False


def _new_episode(http, url: str) -> str:
    return http.post(f"{url}/admin/episodes", json={}, headers={"Authorization": "Bearer bench"}).json()["base_url"]


def _pct(xs) -> dict:
    a = np.asarray(xs) * 1e3
    return {"p50_ms": float(np.percentile(a, 50)), "p90_ms": float(np.percentile(a, 90)),
            "p99_ms": float(np.percentile(a, 99)), "mean_ms": float(a.mean()), "n": int(a.size)}


def latency(url: str, calls: int, warmup: int, turns: int) -> list[float]:
    """Sequential proxy calls; returns per-call seconds."""
    import httpx
    import orjson

    lat = []
    with httpx.Client(timeout=30) as http:
        h, base = _Harness(turns), _new_episode(http, url)
        for i in range(warmup + calls):
            body = h.next_body(False)
            t0 = time.perf_counter()
            r = http.post(f"{base}/chat/completions", content=body, headers={"Content-Type": "application/json"})
            dt = time.perf_counter() - t0
            reply = orjson.loads(r.content)
            if i >= warmup:
                lat.append(dt)
            if h.got(reply):
                base = _new_episode(http, url)
    return lat


def direct(renderer, calls: int, turns: int) -> list[float]:
    """The engine called directly on prompts of the same conversations (TITO-extended)."""
    from agentrl.llm.base import SamplingParams
    from agentrl.types import Message

    engine, sp, lat = _engine(renderer), SamplingParams(max_tokens=16), []
    prompt = renderer.render_ids([Message(m["role"], m["content"]) for m in _messages()])
    for i in range(calls):
        t0 = time.perf_counter()
        out = engine.generate([prompt], sp)[0]
        lat.append(time.perf_counter() - t0)
        if (i + 1) % turns == 0:
            prompt = renderer.render_ids([Message(m["role"], m["content"]) for m in _messages()])
        else:
            prompt = np.concatenate([prompt, out.token_ids, renderer.tail_ids, renderer.encode("obs")])
    return lat


def floor_latency(url: str, calls: int, warmup: int) -> list[float]:
    """``GET models`` on an episode key: the HTTP stack + key lookup, no rendering or engine."""
    import httpx

    lat = []
    with httpx.Client(timeout=30) as http:
        base = _new_episode(http, url)
        for i in range(warmup + calls):
            t0 = time.perf_counter()
            http.get(f"{base}/models")
            if i >= warmup:
                lat.append(time.perf_counter() - t0)
    return lat


def core_latency(renderer, calls: int, turns: int) -> list[float]:
    """The proxy's work without HTTP, in-process: parse → TITO prompt → engine worker →
    reply body → recorded turn (``ProxyCore.start`` + ``chat_body`` + ``finish``)."""
    from agentrl.proxy import RecordingProxy
    from agentrl.proxy.sse import chat_body
    from agentrl.proxy.wire import loads, parse_chat

    proxy, h, lat = RecordingProxy(_engine(renderer), renderer), _Harness(turns), []
    session = proxy.registry.by_key(proxy.create_episode().key)
    for _ in range(calls):
        body = h.next_body(False)
        t0 = time.perf_counter()
        call = proxy.core.start(session, parse_chat(loads(body), proxy.core.sampling))
        reply = chat_body(call)
        call.finish(True)
        lat.append(time.perf_counter() - t0)
        if h.got(reply):
            session = proxy.registry.by_key(proxy.create_episode().key)
    proxy.stop()
    return lat


def sdk_latency(url: str, calls: int, warmup: int) -> list[float]:
    """The same single-turn request through the ``openai`` SDK (client overhead included)."""
    import httpx
    import openai

    with httpx.Client() as http:
        base = _new_episode(http, url)
    client, lat = openai.OpenAI(base_url=base, api_key="x", max_retries=0), []
    for i in range(warmup + calls):
        t0 = time.perf_counter()
        client.chat.completions.create(model="policy", messages=_messages(), max_tokens=16)
        if i >= warmup:
            lat.append(time.perf_counter() - t0)
    return lat


async def _throughput(url: str, harnesses: int, episodes: int, turns: int) -> tuple[float, list[float]]:
    import httpx
    import orjson

    lat: list[float] = []

    async def one(client: httpx.AsyncClient) -> None:
        h = _Harness(turns)
        for _ in range(episodes):
            base = (await client.post(f"{url}/admin/episodes", json={}, headers={"Authorization": "Bearer bench"})
                    ).json()["base_url"]
            done = False
            while not done:
                body = h.next_body(False)
                t0 = time.perf_counter()
                r = await client.post(f"{base}/chat/completions", content=body,
                                      headers={"Content-Type": "application/json"})
                lat.append(time.perf_counter() - t0)
                done = h.got(orjson.loads(r.content))

    clients = [httpx.AsyncClient(timeout=60) for _ in range(harnesses)]
    t0 = time.perf_counter()
    await asyncio.gather(*(one(c) for c in clients))
    wall = time.perf_counter() - t0
    for c in clients:
        await c.aclose()
    return wall, lat


def _with_server(measure_drift: bool, fn):
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_serve, args=(child, measure_drift), daemon=True)
    proc.start()
    try:
        url = parent.recv()
        return fn(url)
    finally:
        parent.send("stop")
        proc.join(30)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--turns", type=int, default=8, help="chat turns per harness episode")
    ap.add_argument("--harnesses", type=int, default=32)
    ap.add_argument("--episodes", type=int, default=4, help="episodes per harness in the throughput run")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "proxy.json"))
    args = ap.parse_args(argv)

    renderer = _renderer()
    base = _pct(direct(renderer, args.calls, args.turns))
    core = _pct(core_latency(renderer, args.calls, args.turns)[args.warmup:])
    rows = {}
    for drift in (True, False):
        lat, floor = _with_server(drift, lambda url: (latency(url, args.calls, args.warmup, args.turns),
                                                      floor_latency(url, args.calls, args.warmup)))
        p = _pct(lat)
        rows["http_floor_models_route"] = _pct(floor)
        rows["drift_on" if drift else "drift_off"] = {**p, "added_p50_ms": p["p50_ms"] - base["p50_ms"],
                                                      "added_p99_ms": p["p99_ms"] - base["p99_ms"]}
    sdk = _pct(_with_server(True, lambda url: sdk_latency(url, args.calls // 2, args.warmup)))
    wall, lat = _with_server(True, lambda url: asyncio.run(
        _throughput(url, args.harnesses, args.episodes, args.turns)))
    result = {
        "benchmark": "proxy",
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "setup": {"engine": "ScriptedEngine (8-token reply)", "tokenizer": "tiny ChatML BPE-2k", "turns": args.turns,
                  "calls": args.calls, "warmup": args.warmup, "client": "httpx keep-alive, raw JSON", "transport":
                  "loopback, proxy in a child process"},
        "direct_engine": base,
        "proxy_core_no_http": {**core, "added_p50_ms": core["p50_ms"] - base["p50_ms"],
                               "added_p99_ms": core["p99_ms"] - base["p99_ms"]},
        "proxy": rows,
        "proxy_openai_sdk": {**sdk, "added_p50_ms": sdk["p50_ms"] - base["p50_ms"]},
        "throughput": {"harnesses": args.harnesses, "episodes": args.harnesses * args.episodes,
                       "calls": len(lat), "wall_s": wall, "calls_per_s": len(lat) / wall, "latency": _pct(lat)},
        "goal": "added p50 <= 1 ms",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()

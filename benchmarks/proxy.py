"""Recording-proxy overhead: added latency per call and throughput with concurrent harnesses.

Setup (loopback only): the tiny ChatML tokenizer (MODELS.md §2.1) and a ``ScriptedEngine``
that answers every call with the same 8 ids, so the engine itself costs microseconds and
what is measured is the proxy: HTTP + JSON, rendering (TITO continuation + drift re-encode),
the engine-worker hop, the reply and the recorded turn. Every server runs in its own child
process (as in production: harness and proxy are different processes).

1. **Latency**: harness episodes of ``--turns`` chat turns (each request re-sends the growing
   history), sequential, keep-alive ``httpx.Client``, raw JSON; all targets in one run,
   interleaved in ``--rounds`` rounds (``--calls`` timed calls each, after ``--warmup``):

   - ``direct_engine``: ``engine.generate`` in-process on the same (TITO-extended) prompt ids
     — no HTTP at all. ``added_p50_ms`` / ``added_p99_ms`` of a target are measured against it:
     the whole cost of reaching the engine through the proxy over loopback HTTP.
   - ``direct_http``: the same engine behind the thinnest OpenAI-compatible server — what a
     harness calls when there is no proxy: the same uvicorn (uvloop, httptools) + Starlette +
     orjson stack; per request it renders and encodes the whole conversation (as any chat
     server does), runs the engine in a worker thread (``run_in_executor``: a real engine
     blocks, so no real server calls it on its event loop), decodes, answers; no recording.
     ``added_vs_http_p50_ms`` = target − ``direct_http``: what the proxy adds to the call a
     harness would otherwise make. ``direct_http_inline`` is the same server calling the
     engine on its event loop (possible only for a microsecond engine like this one): the
     thinnest conceivable server, for reference.
   - ``proxy.drift_on`` (default settings) / ``proxy.drift_off`` (``measure_drift=False``).
   - ``proxy.http_floor_models_route``: ``GET models`` on the proxy (HTTP stack + key lookup
     only), and ``http_floor_chat_post``: the same chat POST answered with a canned reply
     (HTTP + JSON of this request and reply shape, no rendering, no engine) — the floor of
     any chat server here, for reading the numbers on a loaded machine.
   - ``baseline_proxy`` (``--baseline-src DIR``): the proxy of another source tree, e.g. the
     last commit (``git archive HEAD agentrl | tar -x -C DIR``), for before/after in one run.

   ``proxy_core_no_http`` is the proxy's work in-process without HTTP, and
   ``proxy_openai_sdk`` a single-turn request through the ``openai`` SDK (client included).
   ``server_cpu_us_per_call``: CPU time of the server process per timed call (all its threads,
   the recording after each reply included).
2. **Throughput**: ``--harnesses`` concurrent harnesses (asyncio, one ``httpx.AsyncClient``
   connection each) each playing ``--episodes`` episodes, ``--rounds // 2`` times (taking
   turns with the baseline proxy, if any); calls per second and latency percentiles under load.

Usage: ``python benchmarks/proxy.py [--calls 1000] [--rounds 5] [--harnesses 32] [--baseline-src DIR]
[--out benchmarks/results/proxy.json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

try:  # run as a script (``python benchmarks/proxy.py``): ``benchmarks/`` is on sys.path
    from _proxy_servers import Server, scripted_engine, serve_direct, serve_proxy, tiny_renderer
except ModuleNotFoundError:  # imported as ``benchmarks.proxy`` from the repository root
    from benchmarks._proxy_servers import Server, scripted_engine, serve_direct, serve_proxy, tiny_renderer

JSON_HEADERS = {"Content-Type": "application/json"}


def _messages() -> list[dict]:
    return [{"role": "system", "content": "You are an agent playing a text game. Reply with one command."},
            {"role": "user", "content": "You are in room 1 of 5. Admissible actions: go east, look, inventory."}]


class _Harness:
    """Plays episodes: turn k re-sends the history with the replies received so far."""

    def __init__(self, turns: int) -> None:
        self.turns, self.msgs, self.k = turns, [], 0

    def next_body(self) -> bytes:
        import orjson

        if self.k == 0:
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


class _ChatTarget:
    """Sequential harness calls to one server; ``run(n)`` appends n per-call seconds to ``lat``.
    ``url=None`` with ``direct_url``: a server without episodes (``{direct_url}/v1``);
    ``models``: ``GET models`` calls instead of chat calls."""

    def __init__(self, turns: int, url: str | None = None, direct_url: str | None = None, models: bool = False):
        import httpx

        self.http, self.h, self.url, self.lat, self.models = httpx.Client(timeout=30), _Harness(turns), url, [], models
        self.base = _new_episode(self.http, url) if url else f"{direct_url}/v1"

    def run(self, n: int, keep: bool = True) -> None:
        import orjson

        for _ in range(n):
            body = self.h.next_body()
            t0 = time.perf_counter()
            r = self.http.get(f"{self.base}/models") if self.models else \
                self.http.post(f"{self.base}/chat/completions", content=body, headers=JSON_HEADERS)
            dt = time.perf_counter() - t0
            if keep:
                self.lat.append(dt)
            if not self.models and self.h.got(orjson.loads(r.content)) and self.url:
                self.base = _new_episode(self.http, self.url)


class _EngineTarget:
    """The engine called directly in-process on prompts of the same conversations (TITO-extended)."""

    def __init__(self, renderer, turns: int) -> None:
        from agentrl.llm.base import SamplingParams
        from agentrl.types import Message

        self.r, self.turns, self.engine, self.sp, self.lat, self.i = \
            renderer, turns, scripted_engine(renderer), SamplingParams(max_tokens=16), [], 0
        self.first = renderer.render_ids([Message(m["role"], m["content"]) for m in _messages()])
        self.prompt, self.obs = self.first, renderer.encode("obs")

    def run(self, n: int, keep: bool = True) -> None:
        for _ in range(n):
            t0 = time.perf_counter()
            out = self.engine.generate([self.prompt], self.sp)[0]
            dt = time.perf_counter() - t0
            if keep:
                self.lat.append(dt)
            self.i += 1
            self.prompt = self.first if self.i % self.turns == 0 else \
                np.concatenate([self.prompt, out.token_ids, self.r.tail_ids, self.obs])


def core_latency(renderer, calls: int, turns: int) -> list[float]:
    """The proxy's work without HTTP, in-process: parse → TITO prompt → engine worker →
    reply body → recorded turn (``ProxyCore.start`` + ``chat_body`` + ``finish``)."""
    from agentrl.proxy import RecordingProxy
    from agentrl.proxy.sse import chat_body
    from agentrl.proxy.wire import loads, parse_chat

    proxy, h, lat = RecordingProxy(scripted_engine(renderer), renderer), _Harness(turns), []
    session = proxy.registry.by_key(proxy.create_episode().key)
    for _ in range(calls):
        body = h.next_body()
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
                body = h.next_body()
                t0 = time.perf_counter()
                r = await client.post(f"{base}/chat/completions", content=body, headers=JSON_HEADERS)
                lat.append(time.perf_counter() - t0)
                done = h.got(orjson.loads(r.content))

    clients = [httpx.AsyncClient(timeout=60) for _ in range(harnesses)]
    t0 = time.perf_counter()
    await asyncio.gather(*(one(c) for c in clients))
    wall = time.perf_counter() - t0
    for c in clients:
        await c.aclose()
    return wall, lat


def _added(p: dict, base: dict, **others: dict) -> dict:
    """``p`` with ``added_p50_ms``/``added_p99_ms`` against ``base`` and ``added_vs_{name}_*``
    against each of ``others``."""
    out = {**p, "added_p50_ms": p["p50_ms"] - base["p50_ms"], "added_p99_ms": p["p99_ms"] - base["p99_ms"]}
    for name, o in others.items():
        out |= {f"added_vs_{name}_p50_ms": p["p50_ms"] - o["p50_ms"],
                f"added_vs_{name}_p99_ms": p["p99_ms"] - o["p99_ms"]}
    return out


def latency(renderer, calls: int, warmup: int, turns: int, rounds: int, baseline_src: str | None = None) -> dict:
    """Every latency target, interleaved in ``rounds`` rounds in one run (see the module docstring)."""
    servers = {"drift_on": Server(serve_proxy, True), "drift_off": Server(serve_proxy, False),
               "direct_http": Server(serve_direct, True), "direct_http_inline": Server(serve_direct, False),
               "http_floor_models_route": Server(serve_proxy, True)}
    if baseline_src:
        servers |= {"baseline_drift_on": Server(serve_proxy, True, baseline_src),
                    "baseline_drift_off": Server(serve_proxy, False, baseline_src)}
    try:
        targets = {"direct_engine": _EngineTarget(renderer, turns),
                   **{k: _ChatTarget(turns, direct_url=servers[k].url) for k in ("direct_http", "direct_http_inline")},
                   "http_floor_chat_post": _ChatTarget(turns, direct_url=servers["direct_http_inline"].url + "/echo"),
                   **{k: _ChatTarget(turns, servers[k].url) for k in servers if "drift" in k},
                   "http_floor_models_route": _ChatTarget(turns, servers["http_floor_models_route"].url, models=True)}
        for t in targets.values():
            t.run(warmup, keep=False)
        for s in servers.values():
            s.mark()
        c0 = time.process_time()
        for r in range(rounds):
            for t in targets.values():
                t.run(calls // rounds + (r < calls % rounds))
        client_cpu = time.process_time() - c0
    finally:
        cpu = {k: s.stop() for k, s in servers.items()}
    p = {k: {**_pct(t.lat), **({"server_cpu_us_per_call": round(cpu[k] / len(t.lat) * 1e6, 1)}
                               if k in cpu and k != "direct_http_inline" else {})} for k, t in targets.items()}
    base, vs = p["direct_engine"], {"http": p["direct_http"], "http_inline": p["direct_http_inline"]}
    out = {"direct_engine": base, "direct_http": _added(vs["http"], base),
           "direct_http_inline": _added(vs["http_inline"], base), "http_floor_chat_post": _added(
               p["http_floor_chat_post"], base),
           "proxy": {"drift_on": _added(p["drift_on"], base, **vs), "drift_off": _added(p["drift_off"], base, **vs),
                     "http_floor_models_route": p["http_floor_models_route"]},
           "latency_client_cpu_s": client_cpu}
    if baseline_src:
        out["baseline_proxy"] = {"src": baseline_src, **{k[9:]: _added(p[k], base, **vs) for k in p if "baseline" in k}}
    return out


def throughput(harnesses: int, episodes: int, turns: int, rounds: int, srcs: dict[str, str | None]) -> dict:
    """``harnesses`` concurrent harnesses on one proxy (drift measured) per entry of ``srcs``
    (name → source tree, None: this one), the proxies taking turns in ``rounds`` rounds."""
    servers = {k: Server(serve_proxy, True, src) for k, src in srcs.items()}
    walls, lats, client_cpu = {k: 0.0 for k in srcs}, {k: [] for k in srcs}, {k: 0.0 for k in srcs}
    try:
        for s in servers.values():  # warm-up: one episode per harness
            asyncio.run(_throughput(s.url, harnesses, 1, turns))
            s.mark()
        for _ in range(rounds):
            for k, s in servers.items():
                c0 = time.process_time()
                wall, lat = asyncio.run(_throughput(s.url, harnesses, episodes, turns))
                walls[k], client_cpu[k] = walls[k] + wall, client_cpu[k] + time.process_time() - c0
                lats[k] += lat
    finally:
        cpu = {k: s.stop() for k, s in servers.items()}
    return {k: {"harnesses": harnesses, "episodes": harnesses * episodes * rounds, "calls": len(lats[k]),
                "wall_s": walls[k], "calls_per_s": len(lats[k]) / walls[k], "latency": _pct(lats[k]),
                "client_cpu_s": client_cpu[k], "server_cpu_s": cpu[k],
                "server_cpu_us_per_call": round(cpu[k] / len(lats[k]) * 1e6, 1)} for k in srcs}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=1000, help="timed calls per latency target")
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5, help="latency targets interleaved in this many rounds")
    ap.add_argument("--turns", type=int, default=8, help="chat turns per harness episode")
    ap.add_argument("--harnesses", type=int, default=32)
    ap.add_argument("--episodes", type=int, default=4, help="episodes per harness in the throughput run")
    ap.add_argument("--baseline-src", help="also measure the proxy of this source tree (a folder holding an "
                                           "older agentrl/, for before/after in the same run)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "proxy.json"))
    args = ap.parse_args(argv)

    renderer = tiny_renderer()
    t_wall, t_cpu = time.perf_counter(), time.process_time()
    lat = latency(renderer, args.calls, args.warmup, args.turns, args.rounds, args.baseline_src)
    base = lat["direct_engine"]
    core = _pct(core_latency(renderer, args.calls + args.warmup, args.turns)[args.warmup:])
    srv = Server(serve_proxy, True)
    try:
        sdk = _pct(sdk_latency(srv.url, args.calls // 2, args.warmup))
    finally:
        srv.stop()
    thr = throughput(args.harnesses, args.episodes, args.turns, max(1, args.rounds // 2),
                     {"throughput": None, **({"throughput_baseline": args.baseline_src} if args.baseline_src else {})})
    result = {
        "benchmark": "proxy",
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "setup": {"engine": "ScriptedEngine (8-token reply)", "tokenizer": "tiny ChatML BPE-2k", "turns": args.turns,
                  "calls": args.calls, "warmup": args.warmup, "rounds": args.rounds,
                  "client": "httpx keep-alive, raw JSON", "transport": "loopback, each server in a child process"},
        **lat,
        "proxy_core_no_http": _added(core, base),
        "proxy_openai_sdk": {**sdk, "added_p50_ms": sdk["p50_ms"] - base["p50_ms"]},
        **thr,
        "goal": "added p50 <= 1 ms",
        "goal_met": {"vs_direct_engine": lat["proxy"]["drift_on"]["added_p50_ms"] <= 1.0,
                     "vs_direct_http": lat["proxy"]["drift_on"]["added_vs_http_p50_ms"] <= 1.0},
        "wall_s": time.perf_counter() - t_wall, "cpu_s": time.process_time() - t_cpu,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()

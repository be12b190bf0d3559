"""Viewer responsiveness on a large store: page load times on a synthetic 1M-turn store.

1. Builds a store of ``--turns`` turns (default 1,000,000: episodes of 8 turns, groups of 8
   episodes, small token arrays: 16 prompt / 4 completion ids) with one bulk transaction of
   plain SQL inserts (the ``TurnStore`` schema; ``add_episodes`` is not the thing measured),
   one advantage per turn (estimator ``gigpo``, ``--iterations`` iterations, each covering an
   equal slice of the episodes, ``policy_version`` = iteration) and 6 metrics per iteration.
2. Times each page through the ASGI app in-process (``httpx.ASGITransport``, so no socket
   noise): first without the viewer's indexes (dropped: a store written before they joined the
   schema; only the slow pages are timed, 3 requests each), then after adding them back
   (``agentrl store index``'s writable open, whose build time is reported), with ``--reps``
   requests per page. Reports the median and max in milliseconds, and the ratio of
   un-indexed to indexed medians.

Usage: ``python benchmarks/viewer.py [--turns 1000000] [--iterations 100] [--reps 15]
[--out benchmarks/results/viewer.json] [--keep PATH]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

TURNS_PER_EPISODE = 8
EPISODES_PER_GROUP = 8
ACTIONS = ("look", "go east", "go west", "open door", "take key", "inventory")


def build_store(path: Path, n_turns: int, n_iterations: int) -> dict:
    """Write the synthetic store; returns its shape and the build time (s)."""
    from agentrl.store.codec import blob_f32, blob_i32
    from agentrl.store.schema import TURN_BITS, connect

    n_eps = n_turns // TURNS_PER_EPISODE
    eps_per_iter = max(1, -(-n_eps // n_iterations))
    prompt = [blob_i32(np.arange(k, k + 16, dtype=np.int32)) for k in range(8)]
    completion, logprobs = blob_i32(np.array([5, 6, 7, 2], np.int32)), blob_f32(np.full(4, -0.7, np.float32))
    t0 = time.perf_counter()
    conn = connect(path)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO runs (run_key, run_id, created_at) VALUES (1, 'bench', 0)")
    base = 1 << TURN_BITS

    def episodes():
        for e in range(n_eps):
            g, won = e // EPISODES_PER_GROUP, (e * 7) % 5 == 0
            status = "env_error" if e % 997 == 0 else "ok"
            yield (1, e, g, "agentrl/Other-v0" if g % 4 == 0 else "agentrl/Toy-v0", f"task-{g % 500}", g, status,
                   "" if status == "ok" else "worker died", TURNS_PER_EPISODE, float(won), int(won), 0.0)

    def turns():
        for e in range(n_eps):
            g, won, it = e // EPISODES_PER_GROUP, (e * 7) % 5 == 0, e // eps_per_iter
            for t in range(TURNS_PER_EPISODE):
                tid = e * TURNS_PER_EPISODE + t
                last = t == TURNS_PER_EPISODE - 1
                yield (base | tid, 1, tid, e, g, t, None if t == 0 else tid - 1, it, f"You are in room {(t + e) % 5}.",
                       f"room {(t + e) % 5}", f"room {(t + e + 1) % 5}", ACTIONS[(tid * 31) % 6], 1,
                       float(won and last), int(last), 0, prompt[t], completion, logprobs, None,
                       '{"segment":0,"won":true}' if won and last else '{"segment":0}')

    conn.executemany("INSERT INTO episodes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", episodes())
    conn.executemany("INSERT INTO turns (uid, run_key, turn_id, episode_id, group_id, t, parent_turn_id, policy_version, "
                     "observation, anchor_obs, next_anchor_obs, action, action_valid, reward, terminated, truncated, "
                     "prompt_ids, completion_ids, completion_logprobs, hidden, info) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", turns())
    conn.executemany("INSERT INTO advantages VALUES (1, ?, ?, 'gigpo', ?)",
                     ((tid, (tid // TURNS_PER_EPISODE) // eps_per_iter, ((tid * 2654435761) % 1000) / 500 - 1)
                      for tid in range(n_eps * TURNS_PER_EPISODE)))
    conn.executemany("INSERT INTO metrics VALUES (1, ?, ?, ?)",
                     ((it, name, float(np.sin(it / 7 + k))) for it in range(n_iterations)
                      for k, name in enumerate(("rollout/success_rate", "rollout/mean_return", "adv/std",
                                                "update/approx_kl", "update/entropy", "update/loss"))))
    conn.execute("COMMIT")
    conn.close()
    return {"turns": n_eps * TURNS_PER_EPISODE, "episodes": n_eps, "groups": -(-n_eps // EPISODES_PER_GROUP),
            "iterations": n_iterations, "build_s": round(time.perf_counter() - t0, 2),
            "file_mb": round(path.stat().st_size / 2**20, 1)}


def pages(shape: dict) -> dict[str, str]:
    """Name → URL of the pages timed (first, middle and last items of each list)."""
    g_last, e_mid, it_mid = shape["groups"] - 1, shape["episodes"] // 2, shape["iterations"] // 2
    return {
        "runs": "/",
        "run (first groups page)": "/run?run=bench",
        "run (last groups page)": f"/run?run=bench&before={g_last + 1}",
        "run filtered env+success": "/run?run=bench&env=agentrl/Toy-v0&success=1",
        "run filtered policy_version (mid-run)": f"/run?run=bench&policy_version={it_mid}",
        "iteration (mid)": f"/iteration?run=bench&iteration={it_mid}",
        "group (middle)": f"/group?run=bench&group={g_last // 2}",
        "group (last)": f"/group?run=bench&group={g_last}",
        "episode (middle)": f"/episode?run=bench&episode={e_mid}",
        "episode (last, estimator filter)": f"/episode?run=bench&episode={shape['episodes'] - 1}&estimator=gigpo",
        "group sorted by advantage (middle)": f"/group?run=bench&group={g_last // 2}&sort=advantage&desc=1",
        "siblings (middle)": f"/siblings?run=bench&group={g_last // 2}",
        "search (a common action, first page)": "/search?run=bench&q=open%20door&in=action",
        "search (no match: one bounded slice)": "/search?run=bench&q=no%20such%20text",
    }


async def _time(app, urls: dict[str, str], reps: int) -> dict[str, dict]:
    import httpx

    out = {}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench") as client:
        for name, url in urls.items():
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                r = await client.get(url)
                times.append((time.perf_counter() - t0) * 1e3)
                if r.status_code != 200:
                    raise RuntimeError(f"{url} answered {r.status_code}: {r.text[-500:]}")
            out[name] = {"url": url, "median_ms": round(statistics.median(times), 2), "max_ms": round(max(times), 2),
                         "bytes": len(r.content)}
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=1_000_000)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--out", default="benchmarks/results/viewer.json")
    ap.add_argument("--keep", default=None, help="write the store here and keep it (default: a temp file, deleted)")
    args = ap.parse_args(argv)

    from agentrl.store.schema import VIEW_INDEXES, connect
    from agentrl.view import ViewerOptions, create_app

    tmp = None if args.keep else tempfile.TemporaryDirectory()
    path = Path(args.keep) if args.keep else Path(tmp.name) / "viewer-bench.sqlite"
    path.unlink(missing_ok=True)
    shape = build_store(path, args.turns, args.iterations)
    urls = pages(shape)
    slow = {k: urls[k] for k in ("run (first groups page)", "iteration (mid)", "group (middle)", "episode (middle)")}
    conn = connect(path)
    for name in VIEW_INDEXES:  # an older store: no viewer indexes
        conn.execute(f"DROP INDEX {name}")
    conn.close()
    no_index = asyncio.run(_time(create_app(ViewerOptions(store=path)), slow, 3))
    t0 = time.perf_counter()
    connect(path, check=False).close()  # a writable open adds the schema's missing indexes
    index_s = time.perf_counter() - t0
    app = create_app(ViewerOptions(store=path))
    warnings = app.state.warnings
    indexed = asyncio.run(_time(app, urls, args.reps))
    result = {
        "benchmark": "viewer", "store": shape, "index_build_s": round(index_s, 2), "index_warnings": warnings,
        "reps": args.reps, "pages_ms": indexed, "without_viewer_indexes_ms": no_index,
        "slowdown_without_indexes": {k: round(no_index[k]["median_ms"] / indexed[k]["median_ms"], 1) for k in slow},
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
    }
    if tmp is not None:
        tmp.cleanup()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()

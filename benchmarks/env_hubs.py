"""Benchmark the env-hub round trip: added latency per step of an agentrl env served over
OpenEnv (``agentrl envs serve``, a subprocess on 127.0.0.1) and played back through
``agentrl/Remote-v0`` (OpenEnv's official client), vs the same env stepped directly in-process.

For each env, action scripts are recorded on the direct env (random admissible actions, fixed
seed, up to ``--steps`` per episode, over ``--episodes`` reset seeds), then replayed through
both in alternation (direct episode, remote episode, ...). Only ``step`` calls are timed
(wall clock, ``time.perf_counter``); resets are timed separately. Each replay also checks the
remote observations and rewards equal the direct ones. Reported per env: mean / median / p90
step ms, the added ms per step (remote - direct, mean and median), the ratio remote/direct,
and reset ms.

Usage: ``python benchmarks/env_hubs.py [--episodes 6] [--steps 15] [--envs ID ...] [--out PATH]``.
Output: JSON to ``benchmarks/results/env_hubs.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from agentrl.env import make

ROOT = Path(__file__).resolve().parents[1]
ENVS = ("agentrl/Toy-v0", "agentrl/TextWorld-CU1-v0", "agentrl/WebShop-v0")


def record(env_id: str, episodes: int, steps: int, seed: int = 0) -> list[tuple[int, list[str]]]:
    """(reset seed, actions): random admissible actions until the episode ends or ``steps``."""
    env, rng, out = make(env_id), np.random.default_rng(seed), []
    for s in range(episodes):
        _, info = env.reset(seed=s)
        acts = []
        for _ in range(steps):
            adm = info["admissible_actions"]
            acts.append(str(adm[int(rng.integers(len(adm)))]))
            _, _, term, trunc, info = env.step(acts[-1])
            if term or trunc:
                break
        out.append((s, acts))
    env.close()
    return out


def replay(env, seed: int, actions: list[str]) -> tuple[float, list[float], list[tuple]]:
    """Reset time (s), step times (s) and (obs, reward, terminated) per step."""
    t0 = time.perf_counter()
    env.reset(seed=seed)
    reset_s, times, seen = time.perf_counter() - t0, [], []
    for a in actions:
        t0 = time.perf_counter()
        obs, r, term, trunc, _ = env.step(a)
        times.append(time.perf_counter() - t0)
        seen.append((obs, float(r), bool(term)))
    return reset_s, times, seen


def start_server(env_id: str):
    """``agentrl envs serve env_id --port 0`` as a subprocess; returns (proc, url)."""
    proc = subprocess.Popen([sys.executable, "-m", "agentrl", "envs", "serve", env_id, "--port", "0", "--slots", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "NO_PROXY": "127.0.0.1,localhost"})
    for line in proc.stdout:
        m = re.search(r" at (http://\S+)", line)
        if m:
            return proc, m.group(1)
    raise RuntimeError(f"server for {env_id} exited with {proc.wait()}")


def _ms(xs: list[float]) -> dict:
    xs = sorted(xs)
    return {"mean": 1e3 * statistics.fmean(xs), "median": 1e3 * statistics.median(xs),
            "p90": 1e3 * xs[int(0.9 * (len(xs) - 1))], "n": len(xs)}


def bench(env_id: str, episodes: int, steps: int) -> dict:
    scripts = record(env_id, episodes, steps)
    proc, url = start_server(env_id)
    try:
        direct, remote = make(env_id), make("agentrl/Remote-v0", base_url=url)
        d_steps, r_steps, d_resets, r_resets, same = [], [], [], [], True
        for seed, acts in scripts:
            replay(remote, seed, acts[:1])  # warm the session path once per episode shape
            dr, dt, ds = replay(direct, seed, acts)
            rr, rt, rs = replay(remote, seed, acts)
            d_steps += dt
            r_steps += rt
            d_resets.append(dr)
            r_resets.append(rr)
            same &= ds == rs
        direct.close()
        remote.close()
    finally:
        proc.terminate()
        proc.wait(15)
    d, r = _ms(d_steps), _ms(r_steps)
    return {"env_id": env_id, "episodes": len(scripts), "steps": len(d_steps), "same_observations_and_rewards": same,
            "direct_step_ms": d, "remote_step_ms": r,
            "added_ms_per_step_mean": r["mean"] - d["mean"], "added_ms_per_step_median": r["median"] - d["median"],
            "ratio_remote_over_direct_mean": r["mean"] / d["mean"],
            "direct_reset_ms": _ms(d_resets), "remote_reset_ms": _ms(r_resets)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=6)
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--envs", nargs="*", default=list(ENVS))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "env_hubs.json"))
    args = ap.parse_args()
    import openenv

    rows = []
    for env_id in args.envs:
        row = bench(env_id, args.episodes, args.steps)
        rows.append(row)
        print(f"{env_id}: direct {row['direct_step_ms']['mean']:.2f} ms/step, round trip "
              f"{row['remote_step_ms']['mean']:.2f} ms/step (+{row['added_ms_per_step_mean']:.2f} ms, "
              f"x{row['ratio_remote_over_direct_mean']:.1f}), same={row['same_observations_and_rewards']}", flush=True)
    out = {"benchmark": "env_hubs", "date": time.strftime("%Y-%m-%d"), "python": platform.python_version(),
           "cpus": os.cpu_count(), "openenv_core": openenv.__version__, "transport": "OpenEnv WebSocket over loopback",
           "episodes": args.episodes, "max_steps": args.steps, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

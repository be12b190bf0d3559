"""Benchmark the env layer's overhead, side by side in one run.

1. TextWorld step overhead: the same recorded action scripts (random admissible commands,
   fixed seed, on CU1 games from the cache) replayed through (a) the bare engine,
   ``textworld.start(path, request_infos=...)`` with the same ``EnvInfos`` our wrapper
   requests, and (b) ``agentrl.env.make("agentrl/TextWorld-v0")`` (gymnasium wrappers +
   ``TextWorldEnv``: banner/status cleaning, per-step reward, validity). Both envs replay
   the script in lock-step (alternating which steps first) and only step calls are timed;
   reported per clock (wall; process CPU time, robust to other load on the machine): the
   ratio ours/bare of summed step time, and per repetition; plus the layer's own cost per
   step measured over an engine stub that replays recorded game states (goal ≤ 1.05).
2. EnvPool overhead: mean wall time of one ``EnvPool.step`` call over ``n`` slots (Toy env,
   whose step costs ~µs, so the number is the IPC + scheduling cost) vs stepping the same
   envs in-process, for 1 worker × 1 slot and 2 workers × 4 slots; and TextWorld through a
   2-worker pool vs in-process sequential stepping (per env-step).

Usage: ``python benchmarks/env_overhead.py [--games 4] [--steps 40] [--reps 5] [--out PATH]``.
Output: JSON to ``benchmarks/results/env_overhead.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from agentrl.env import EnvPool, make

ROOT = Path(__file__).resolve().parents[1]
TW_ID = "agentrl/TextWorld-v0"  # CU1 games, 50-turn limit (so scripts of 40 steps never truncate)


def record_scripts(n_games: int, n_steps: int, seed: int = 0) -> list[tuple[int, str, list[str]]]:
    """(task_index, game path, actions): random admissible actions until the game ends."""
    env = make(TW_ID, n_tasks=n_games)
    rng, scripts = np.random.default_rng(seed), []
    for i in range(n_games):
        _, info = env.reset(seed=0, options={"task_index": i})
        actions = []
        for _ in range(n_steps):
            adm = info["admissible_actions"]
            actions.append(adm[int(rng.integers(len(adm)))])
            _, _, term, trunc, info = env.step(actions[-1])
            if term or trunc:
                break
        scripts.append((i, str(env.unwrapped._game), actions))
    env.close()
    return scripts


def time_lockstep(scripts, n_games: int, infos) -> tuple[list[float], list[float]]:
    """Replay every script through the bare engine and through our env in lock-step
    (alternating which goes first each step, so load drift hits both alike).
    Returns (bare, ours): one (wall s, CPU s) pair per step each."""
    import textworld

    ours_env = make(TW_ID, n_tasks=n_games)
    bare_t, ours_t = [], []
    for i, path, actions in scripts:
        bare = textworld.start(path, request_infos=infos)
        bare.reset()
        ours_env.reset(seed=0, options={"task_index": i})
        for k, a in enumerate(actions):
            order = ((bare.step, bare_t), (ours_env.step, ours_t))
            for step, sink in (order if k % 2 == 0 else order[::-1]):
                t0, c0 = time.perf_counter(), time.process_time()
                step(a)
                sink.append((time.perf_counter() - t0, time.process_time() - c0))
        bare.close()
    ours_env.close()
    return bare_t, ours_t


def wrapper_only_cost(scripts, n_games: int, infos) -> float:
    """Seconds per step of our layer alone: ``TextWorldEnv.step`` + gymnasium wrappers over
    an engine stub that returns pre-recorded game states instantly."""
    import textworld

    recorded = []
    for _, path, actions in scripts:
        bare = textworld.start(path, request_infos=infos)
        bare.reset()
        recorded += [bare.step(a) for a in actions]
        bare.close()
    actions = [a for _, _, acts in scripts for a in acts]

    class _Stub:
        def __init__(self):
            self.k = 0

        def step(self, cmd):
            self.k += 1
            return recorded[(self.k - 1) % len(recorded)]

    env = make(TW_ID, n_tasks=n_games, max_turns=10**9)
    env.reset(seed=0, options={"task_index": 0})
    env.unwrapped._env, n = _Stub(), 20 * len(actions)
    t0 = time.perf_counter()
    for k in range(n):
        env.unwrapped._done = False
        env.step(actions[k % len(actions)])
    return (time.perf_counter() - t0) / n


def textworld_overhead(n_games: int, n_steps: int, reps: int) -> dict:
    scripts = record_scripts(n_games, n_steps)
    infos = make(TW_ID, n_tasks=n_games).unwrapped._infos
    out: dict = {"games": n_games, "reps": reps, "goal_ratio_max": 1.05}
    bare_all, ours_all = [], []
    for _ in range(reps):
        bare, ours = time_lockstep(scripts, n_games, infos)
        bare_all.append(bare)
        ours_all.append(ours)
    out["steps_per_rep"] = len(bare_all[0])
    for j, clock in enumerate(("wall", "cpu")):
        b = [sum(x[j] for x in rep) for rep in bare_all]
        o = [sum(x[j] for x in rep) for rep in ours_all]
        n = out["steps_per_rep"]
        out[clock] = {"bare_step_ms_per_rep": [1e3 * x / n for x in b],
                      "agentrl_step_ms_per_rep": [1e3 * x / n for x in o],
                      "ratio_per_rep": [y / x for x, y in zip(b, o)],
                      "ratio_agentrl_over_bare": sum(o) / sum(b)}
    wrap = wrapper_only_cost(scripts, n_games, infos)
    bare_cpu = sum(x[1] for rep in bare_all for x in rep) / (reps * out["steps_per_rep"])
    out["wrapper_only_step_us"] = 1e6 * wrap
    out["ratio_from_wrapper_cost"] = (bare_cpu + wrap) / bare_cpu  # (engine + layer) / engine
    return out


def pool_vs_inprocess(env_id: str, n: int, workers: int, calls: int, env_kwargs: dict) -> dict:
    """Mean seconds per batched step call: in-process loop over n envs vs EnvPool.step."""
    envs = [make(env_id, **env_kwargs) for _ in range(n)]
    for i, e in enumerate(envs):
        e.reset(seed=i)
    t0 = time.perf_counter()
    for _ in range(calls):
        for e in envs:
            e.step("look")
    inproc = (time.perf_counter() - t0) / calls
    with EnvPool(env_id, n, env_kwargs=env_kwargs, num_workers=workers) as pool:
        pool.reset(list(range(n)), list(range(n)))
        pool.step({s: "look" for s in range(n)})  # warm-up
        t0 = time.perf_counter()
        for _ in range(calls):
            res = pool.step({s: "look" for s in range(n)})
        pooled = (time.perf_counter() - t0) / calls
        assert all(r.error is None for r in res.values())
    return {"env_id": env_id, "slots": n, "workers": workers, "calls": calls,
            "inprocess_call_ms": inproc * 1e3, "pool_call_ms": pooled * 1e3,
            # extra wall time per env step vs stepping the envs sequentially in-process
            # (negative: the workers' parallelism outweighs the IPC cost)
            "pool_overhead_per_env_step_ms": (pooled - inproc) * 1e3 / n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--games", type=int, default=4)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "env_overhead.json")
    args = ap.parse_args()
    toy_kwargs = {"max_turns": 10_000}
    tw_kwargs = {"n_tasks": 2, "max_turns": 10_000}
    result = {
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "textworld_step_overhead": textworld_overhead(args.games, args.steps, args.reps),
        "envpool": [
            pool_vs_inprocess("agentrl/Toy-v0", 1, 1, 2000, toy_kwargs),
            pool_vs_inprocess("agentrl/Toy-v0", 4, 2, 1000, toy_kwargs),
            pool_vs_inprocess("agentrl/TextWorld-CU1-v0", 2, 2, 200, tw_kwargs),
        ],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

"""Step latency of ``agentrl/ALFWorld-v0`` vs the bare engine (TextWorld ``PddlEnv`` +
``AlfredDemangler``, the same objects the env wraps), side by side in one run.

Both play the same games with the same action sequence (uniform over admissible commands,
fixed seed) and the same episode length; measurements alternate between the two per
episode so machine load affects both alike. Writes ``benchmarks/results/envs_alfworld.json``
(times in milliseconds; ``ratio_*`` = ours / bare).

Usage: ``python benchmarks/envs_alfworld.py [--games 4] [--steps 40] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np


def _bare_engine():
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
    from textworld.envs.pddl import PddlEnv

    return AlfredDemangler(PddlEnv(textworld.EnvInfos(won=True, admissible_commands=True)))


def _actions(admissible: list[str], rng: np.random.Generator) -> str:
    return admissible[int(rng.integers(len(admissible)))]


def run_bare(engine, steps: int, seed: int) -> list[float]:
    """Per-step seconds of the bare engine for one episode (already loaded)."""
    rng = np.random.default_rng(seed)
    state = engine.reset()
    out = []
    for _ in range(steps):
        cmd = _actions(state["admissible_commands"], rng)
        t = time.perf_counter()
        state, _, _ = engine.step(cmd)
        out.append(time.perf_counter() - t)
    return out


def run_ours(env, task_id: str, steps: int, seed: int) -> list[float]:
    """Per-step seconds of ALFWorldEnv for one episode (max_turns > steps)."""
    rng = np.random.default_rng(seed)
    _, info = env.reset(options={"task_id": task_id})
    out = []
    for _ in range(steps):
        cmd = _actions(info["admissible_actions"], rng)
        t = time.perf_counter()
        _, _, term, _, info = env.step(cmd)
        out.append(time.perf_counter() - t)
        if term:
            _, info = env.reset(options={"task_id": task_id})
    return out


def summary(xs: list[float]) -> dict[str, float]:
    ms = np.asarray(xs) * 1e3
    return {"mean_ms": float(ms.mean()), "p50_ms": float(np.median(ms)), "p95_ms": float(np.percentile(ms, 95)), "n": len(xs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--games", type=int, default=4)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "envs_alfworld.json"))
    args = ap.parse_args()

    from agentrl.env import make
    from agentrl_envs.alfworld import data

    games = data.list_games("eval_unseen")[:: max(1, 134 // args.games)][: args.games]
    ours_t, bare_t = [], []
    for g in games:
        env = make("agentrl/ALFWorld-v0", split="eval_unseen", max_turns=10_000)
        engine = _bare_engine()
        engine.load(data.load_game(g.path))
        env.reset(options={"task_id": g.task_id})
        for r in range(args.rounds):
            bare_t += run_bare(engine, args.steps, seed=r)
            ours_t += run_ours(env, g.task_id, args.steps, seed=r)
        env.close()
        engine.close()
    ours, bare = summary(ours_t), summary(bare_t)
    result = {
        "benchmark": "envs_alfworld step latency",
        "games": [g.task_id for g in games], "steps_per_episode": args.steps, "rounds": args.rounds,
        "ours": ours, "bare_engine": bare,
        "ratio_mean": ours["mean_ms"] / bare["mean_ms"], "ratio_p50": ours["p50_ms"] / bare["p50_ms"],
        "machine": {"python": platform.python_version(), "cpu": platform.processor() or platform.machine()},
        "note": "wall-clock; the machine may be shared, compare the ratio rather than absolute ms",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("ours", "bare_engine", "ratio_mean", "ratio_p50")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

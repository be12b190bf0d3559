"""Untrained SmolLM2's exact success on ``agentrl/JunctionMaze-v0``, per env setting (issue 38:
"the untrained policy should win 10–30 % at K = 5").

For each setting (K, ``n_hinted``) and each of ``--mazes`` train-split mazes: π in every
non-terminal state from one forward per distinct prompt (``llm_maze.PolicyTables``: the rollout's
Markov prompt, constrained decoding renormalised over the token trie), then the exact success
probability V^π(start) by backward induction (``agentrl.credit.exact.exact_values``; reward 1 on a
win, γ = 1). No sampling: the number is the policy's, not a batch's. Reported per setting: mean
over mazes with a 95 % bootstrap interval (over mazes), and the same for K = 1.

Usage: ``python -m studies.junction_untrained --hinted 20 21 22 --ks 1 5 --mazes 48``
Writes ``results/junction_untrained.json``; ``--summary`` prints its Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

import gymnasium as gym

import agentrl_envs  # noqa: F401  (registers the ids)

ENV_ID = "agentrl/JunctionMaze-v0"


def maze_graphs(k: int, n_hinted: int, n: int, max_turns: int = 24, split: str = "train", **env_kwargs) -> list:
    """``n`` task graphs of ``split`` (env seeds 0..n-1) at (K, n_hinted, more env kwargs, e.g. ``n_exits``)."""
    env = gym.make(ENV_ID, k=k, split=split, n_hinted=n_hinted, max_turns=max_turns, **env_kwargs).unwrapped
    out = []
    for seed in range(n):
        env.reset(seed=seed)
        out.append(env.task_graph())
    env.close()
    return out


def bootstrap_ci(x: np.ndarray, reps: int = 4000, seed: int = 0) -> list[float]:
    """95 % percentile bootstrap interval of the mean of ``x`` (float64[n])."""
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), (reps, len(x)))].mean(axis=1)
    return [float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))]


def summary(data: dict) -> str:
    """Markdown: one row per (K, n_hinted)."""
    lines = ["| K | n_hinted | mazes | exact success under π | 95 % CI | forwards |", "|---|---|---|---|---|---|"]
    for r in data["rows"]:
        lines.append(f"| {r['k']} | {r['n_hinted']} | {r['mazes']} | {100 * r['success']:.1f} % | "
                     f"[{100 * r['ci'][0]:.1f}, {100 * r['ci'][1]:.1f}] | {r['forwards']} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hinted", type=int, nargs="+", default=[20, 21, 22])
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 5])
    ap.add_argument("--mazes", type=int, default=48)
    ap.add_argument("--max-turns", type=int, default=24)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "junction_untrained.json"))
    ap.add_argument("--summary", action="store_true")
    args = ap.parse_args()
    if args.summary:
        print(summary(json.loads(Path(args.out).read_text())))
        return
    import torch
    from studies.llm_maze import PolicyTables, markov_loop
    from transformers import AutoTokenizer

    from agentrl.credit.exact import exact_values
    from agentrl.llm.chat import ChatRenderer
    from agentrl.llm.hf import HFEngine
    from agentrl.llm.models import resolve_model

    torch.set_num_threads(1)
    path = resolve_model(args.model)
    engine = HFEngine.from_pretrained(path, dtype="float32", num_threads=1)
    renderer = ChatRenderer(AutoTokenizer.from_pretrained(path))
    tables = PolicyTables(engine.model, renderer, markov_loop(args.max_turns), engine.pad_token_id)
    t0, load0, rows = time.time(), os.getloadavg()[0], []
    for n_hinted in args.hinted:
        for k in args.ks:
            f0, succ = tables.forwards, []
            for g in maze_graphs(k, n_hinted, args.mazes, args.max_turns):
                pi, _ = tables.graph_policy(g)
                succ.append(exact_values(g, pi).v(0, g.start))
            x = np.asarray(succ, np.float64)
            rows.append({"k": k, "n_hinted": n_hinted, "mazes": len(x), "success": float(x.mean()),
                         "ci": bootstrap_ci(x), "forwards": tables.forwards - f0})
            print(summary({"rows": rows[-1:]}).splitlines()[-1], flush=True)
    data = {"config": {"model": args.model, "dtype": "float32", "max_turns": args.max_turns,
                       "mazes": "train split, env seeds 0..mazes-1", "loop": "markov_loop (window_k 0, admissible, "
                       "constrained decoding)", "temperature": 1.0},
            "date": time.strftime("%Y-%m-%d"), "host": platform.node(), "torch": torch.__version__,
            "wall_s": time.time() - t0, "load": [load0, os.getloadavg()[0]], "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(data, indent=1))
    print(summary(data))


if __name__ == "__main__":
    main()

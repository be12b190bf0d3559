"""Learning benchmark: held-out success before vs after RL, GRPO vs GiGPO at the same budget.

The LEARNING.md setup: SmolLM2-135M-Instruct in bf16, decoding constrained to the
admissible commands, LoRA on the top 6 layers, TextWorld "cu1" (or "cc3") games, groups of
4, one on-policy PPO step per iteration. For each estimator and seed the script evaluates
the packaged model on the held-out panel (greedy and sampled), trains, evaluates the final
checkpoint on the same panel, and writes everything (success rates, 95 % Wilson intervals,
panel hash, wall times, the exact config) to ``benchmarks/results/learning.json``.

Usage::

    .venv/bin/python benchmarks/learning.py --env cu1 --iterations 16 --seeds 0 \
        --estimators grpo gigpo [--panel 40]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict
from pathlib import Path

ENVS = {"cu1": ("agentrl/TextWorld-CU1-v0", 8), "cc3": ("agentrl/TextWorld-CC3-v0", 10)}
OUT = Path(__file__).parent / "results" / "learning.json"


def _evals(cfg, checkpoint=None) -> dict:
    from agentrl.eval import evaluate, load_eval_policy

    policy = load_eval_policy(cfg, checkpoint)
    out = {}
    for greedy in (True, False):
        result, _ = evaluate(policy.engine, policy.renderer, cfg, greedy=greedy)
        out["greedy" if greedy else "sampled"] = asdict(result)
    return out


def run_one(env: str, estimator: str, seed: int, iterations: int, panel: int, out_dir: Path) -> dict:
    """Before-eval, training, after-eval of one (env, estimator, seed)."""
    from agentrl.config import load_config, to_dict
    from agentrl.train import train

    env_id, max_turns = ENVS[env]
    name = f"learning-{env}-{estimator}-s{seed}"
    overrides = [f"run.name={name}", f"run.out_dir={out_dir}", f"run.seed={seed}", f"run.iterations={iterations}",
                 "run.eval_every=0", f"run.save_every={iterations}", f"env.id={env_id}", f"env.max_turns={max_turns}",
                 f"env.eval_panel_size={panel}", "rollout.groups_per_iteration=6", "rollout.group_size=4",
                 f"algorithm.estimator={estimator}", "algorithm.kwargs={}",
                 "log.console=false"]
    cfg = load_config(Path(__file__).parents[1] / "examples" / "gigpo_textworld.yaml", overrides)
    t0 = time.perf_counter()
    before = _evals(cfg)
    t1 = time.perf_counter()
    result = train(cfg, resume=False)
    t2 = time.perf_counter()
    ckpt = result.run_dir / "checkpoints" / (result.run_dir / "checkpoints" / "latest").read_text().strip()
    after = _evals(cfg, ckpt)
    t3 = time.perf_counter()
    return {"env": env, "estimator": estimator, "seed": seed, "iterations": iterations,
            "optimizer_steps": result.state.optimizer_steps, "before": before, "after": after,
            "seconds": {"eval_before": t1 - t0, "train": t2 - t1, "eval_after": t3 - t2, "total": t3 - t0},
            "config": to_dict(cfg)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", choices=sorted(ENVS), default="cu1")
    ap.add_argument("--estimators", nargs="+", default=["grpo", "gigpo"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--iterations", type=int, default=16)
    ap.add_argument("--panel", type=int, default=40, help="held-out tasks (default: 40)")
    ap.add_argument("--out-dir", default="runs/learning")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    rows = []
    for seed in args.seeds:
        for est in args.estimators:
            row = run_one(args.env, est, seed, args.iterations, args.panel, Path(args.out_dir))
            rows.append(row)
            b, a = row["before"]["greedy"], row["after"]["greedy"]
            print(f"{args.env} {est} seed {seed}: greedy {b['success_rate']:.1%} -> {a['success_rate']:.1%}, "
                  f"sampled {row['before']['sampled']['success_rate']:.1%} -> {row['after']['sampled']['success_rate']:.1%}, "
                  f"{row['seconds']['total']:.0f} s", flush=True)
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps({"runs": rows}, indent=1, default=float))


if __name__ == "__main__":
    main()

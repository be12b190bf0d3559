"""What the model-based step scorers cost on the main job: GRPO vs OPRL (trained PRM and ``prm_lr: 0``)
vs StepOPSD, side by side (issue 50).

The main job's config (``examples/gigpo_textworld.yaml``: SmolLM2-135M-Instruct + LoRA, real TextWorld
cu1 games, 4 × 4 episodes per iteration) with ``algorithm.estimator`` set per arm, no evaluation,
the same run seed, so iteration 1's rollouts are the same episodes in every arm. Per arm one
``agentrl train`` subprocess; from its ``metrics.jsonl`` per iteration: rollout, credit (the scorers'
passes and the estimator) and update seconds, the scorer's own seconds and forward / backward rows
per turn. Reported: per arm the medians, and the credit and iteration ratios to GRPO's on iteration 1
(same episodes) and over all iterations.

Usage: ``python benchmarks/scorer_cost.py [--iterations 2] [--arms grpo,oprl,oprl_frozen,stepopsd]
[--smoke] [--out benchmarks/results/scorer_cost.json]``. ``--smoke``: the junction maze (k = 1) and
the tiny random model (agentrl.llm.tiny), for the test.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _cpu import cpu_dtype

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "gigpo_textworld.yaml"
#: arm → the overrides that make it (the main job's config otherwise).
ARMS = {
    "grpo": ["algorithm.estimator=grpo"],
    "oprl": ["algorithm.estimator=oprl"],
    "oprl_frozen": ["algorithm.estimator=oprl", "algorithm.scorers.prm.prm_lr=0"],
    "stepopsd": ["algorithm.estimator=stepopsd", "algorithm.kwargs.lambda_mix=1.0", "algorithm.kwargs.alpha_clip=0.5"],
}


def overrides(arm: str, args, out_dir: Path) -> list[str]:
    """The ``key=value`` overrides of ``arm``'s run."""
    common = [f"run.name=cost-{arm}", f"run.out_dir={out_dir}", f"run.iterations={args.iterations}",
              "run.eval_every=0", "run.save_every=0", "run.eval_before=false", "log.console=false",
              "algorithm.kwargs={}", *ARMS[arm]]
    if args.smoke:
        return common + [f"policy.model={args.tiny}", "env.id=agentrl/JunctionMaze-v0", "env.kwargs={k: 1}",
                         "env.max_turns=6", "rollout.groups_per_iteration=2",
                         "rollout.group_size=3", "rollout.num_workers=1", "policy.max_tokens=8",
                         "policy.action_format=whole", "policy.dtype=float32", "update.micro_batch=4",
                         "policy.lora.top_n_layers=null", "policy.lora.rank=4"]
    return common + [f"policy.dtype={cpu_dtype()}"]


def run_one(arm: str, args, out_dir: Path) -> dict:
    """One ``agentrl train`` subprocess; its per-iteration timings and scorer metrics."""
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "agentrl", "train", str(args.config), *overrides(arm, args, out_dir), "--no-resume"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"benchmark arm {arm} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    rows = [json.loads(x) for x in (out_dir / f"cost-{arm}" / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "time/credit_s" in r]
    keys = ("time/rollout_s", "time/credit_s", "time/update_s", "prm/seconds", "prm/forward_rows_per_turn",
            "prm/backward_rows_per_turn", "prm/pairs", "hindsight/seconds", "hindsight/forward_rows_per_turn",
            "rollout/turns")
    its = [{k: r[k] for k in keys if k in r} for r in rows]
    for it in its:
        it["iteration_s"] = it["time/rollout_s"] + it["time/credit_s"] + it["time/update_s"]
    return {"iterations": its, "wall_s": time.perf_counter() - t0}


def summary(results: dict) -> dict:
    """Per arm: medians over iterations, and iteration 1's and the medians' ratios to GRPO."""
    out = {}
    base = results.get("grpo")
    for arm, r in results.items():
        its = r["iterations"]
        med = {k: statistics.median(it[k] for it in its if k in it) for k in its[0]}
        row = {"median": med, "first": its[0]}
        if base is not None:
            b0, bm = base["iterations"][0], {k: statistics.median(it[k] for it in base["iterations"])
                                             for k in ("iteration_s", "time/credit_s")}
            row["iteration1_ratio_vs_grpo"] = its[0]["iteration_s"] / b0["iteration_s"]
            row["median_iteration_ratio_vs_grpo"] = med["iteration_s"] / bm["iteration_s"]
            row["iteration1_credit_s_minus_grpo"] = its[0]["time/credit_s"] - b0["time/credit_s"]
        out[arm] = row
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--iterations", type=int, default=2)
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--config", type=Path, default=EXAMPLE)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "scorer_cost.json")
    args = p.parse_args(argv)
    arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise SystemExit(f"unknown arm(s) {unknown}; choose from {list(ARMS)}")
    with tempfile.TemporaryDirectory() as tmp:
        if args.smoke:
            from agentrl.llm.tiny import tiny_model_dir

            args.tiny = tiny_model_dir(Path(tmp) / "tiny")
        results = {arm: run_one(arm, args, Path(tmp) / "runs") for arm in arms}
    report = {"benchmark": "scorer_cost", "date": datetime.date.today().isoformat(), "host": platform.node(),
              "cpu_bf16": cpu_dtype() == "bfloat16", "iterations": args.iterations, "smoke": args.smoke,
              "config": str(args.config.relative_to(ROOT)) if args.config.is_relative_to(ROOT) else str(args.config),
              "arms": {a: ARMS[a] for a in arms}, "results": results, "summary": summary(results)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    for arm, row in report["summary"].items():
        print(f"{arm:12s} iteration 1 {row['first']['iteration_s']:7.1f} s (credit {row['first']['time/credit_s']:6.1f} s)"
              + (f"  x{row['iteration1_ratio_vs_grpo']:.2f} of grpo" if "iteration1_ratio_vs_grpo" in row else ""))


if __name__ == "__main__":
    main()

"""Synchronous vs asynchronous rollouts: ``rollout.max_staleness`` 0 vs 1, side by side.

The main job's config (``examples/gigpo_textworld.yaml``: GiGPO, SmolLM2-135M-Instruct +
LoRA, real TextWorld cu1 games, 4 iterations of 4 × 4 episodes, then the 16 held-out games
greedily) with the rollouts on one engine worker process apart from the trainer
(``rollout.engines: 1``) and one torch thread in each (``policy.num_threads: 1``) — on a
2-core machine the engine and the trainer then each own a core. Per configuration, one
``agentrl train`` subprocess; from its ``metrics.jsonl``:

- wall seconds per iteration (rollout-or-wait + credit + update + weight push);
- trainer idle fraction (S = 0: the rollout; S ≥ 1: ``async/wait_s``) and engine idle
  fraction (S = 0: everything but the rollout; S ≥ 1: ``async/engine_idle_frac``);
- held-out greedy success after the same number of updates (``eval/greedy_success``).

Ratios (S = 0 / S = 1 wall per iteration, over all iterations and from iteration 1 on, when
the pipeline is full) sit beside the upper bound ``(R + U) / max(R, U)`` from the
synchronous run's rollout time R and update time U. ``--correction`` sets
``update.rollout_correction`` of the asynchronous runs (default ``tis``).

Usage: ``python benchmarks/async.py [--iterations 4] [--staleness 0,1] [--smoke]
[--out benchmarks/results/async.json]``. ``--smoke``: the toy env and the tiny random model
(agentrl.llm.tiny), 3 iterations (the test). A GPU run: ``--device cuda`` puts trainer and
engine on the GPU (``policy.device``), bf16; the model stays the config's.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _cpu import cpu_dtype

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "gigpo_textworld.yaml"


def overrides(s: int, args, out_dir: Path) -> list[str]:
    """The ``key=value`` overrides of the run with ``max_staleness = s``."""
    common = [f"run.name=async-s{s}", f"run.out_dir={out_dir}", f"run.iterations={args.iterations}",
              f"run.eval_every={args.iterations}", f"run.save_every={args.iterations}", "run.eval_before=false",
              "rollout.engines=1",
              f"rollout.max_staleness={s}", "policy.num_threads=1", "log.console=false"]
    if s:
        common.append(f"update.rollout_correction={args.correction}")
    if args.smoke:
        return common + [f"policy.model={args.tiny}", "env.id=agentrl/Toy-v0", "env.eval_panel_size=3",
                         "rollout.groups_per_iteration=2", "rollout.group_size=2", "rollout.num_workers=1",
                         "policy.max_tokens=8", "policy.lora=null", "policy.dtype=float32", "update.micro_batch=4"]
    dtype = "bfloat16" if args.device == "cuda" else cpu_dtype()
    return common + [f"policy.dtype={dtype}", f"policy.device={args.device}"]


def run_one(s: int, args, out_dir: Path) -> dict:
    """One ``agentrl train`` subprocess; its per-iteration timings and final held-out success."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "agentrl", "train", str(args.config), *overrides(s, args, out_dir), "--no-resume"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    total = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"benchmark run S={s} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    rows = [json.loads(x) for x in (out_dir / f"async-s{s}" / "metrics.jsonl").read_text().splitlines()]
    its = []
    for r in rows:
        wait = r.get("async/wait_s", r.get("time/rollout_s", 0.0))
        wall = r.get("time/rollout_s", 0.0) + r.get("time/credit_s", 0.0) + r.get("time/update_s", 0.0)
        its.append({"wall_s": wall, "rollout_or_wait_s": r.get("time/rollout_s", 0.0),
                    "update_s": r.get("time/update_s", 0.0), "credit_s": r.get("time/credit_s", 0.0),
                    "trainer_idle_frac": wait / max(wall, 1e-9),
                    "engine_idle_frac": r["async/engine_idle_frac"] if s else 1.0 - wait / max(wall, 1e-9),
                    "staleness_mean": r.get("async/staleness_mean", 0.0),
                    "dropped_groups": r.get("async/dropped_groups", 0.0),
                    "correction_kl": r.get("correction/kl"), "correction_capped_frac": r.get("correction/capped_frac"),
                    "success_rate": r.get("rollout/success_rate"), "update_steps": r.get("update/steps", 0.0)})
    final = rows[-1]
    return {"max_staleness": s, "iterations": its, "process_s": total,
            "greedy_success": final.get("eval/greedy_success"), "eval_n": final.get("eval/n"),
            "optimizer_steps": sum(i["update_steps"] for i in its)}


def _mean(xs: list[float]) -> float:
    return sum(xs) / max(len(xs), 1)


def compare(runs: dict[int, dict]) -> dict:
    """Speed-ups of each S ≥ 1 over S = 0 and the (R + U) / max(R, U) bound of the S = 0 run."""
    base = runs[0]["iterations"]
    r, u = _mean([i["rollout_or_wait_s"] for i in base]), _mean([i["update_s"] + i["credit_s"] for i in base])
    out = {"bound": (r + u) / max(r, u, 1e-9), "sync_rollout_s": r, "sync_update_s": u}
    for s, run in runs.items():
        if s == 0:
            continue
        its = run["iterations"]
        out[f"s{s}"] = {
            "speedup_all": _mean([i["wall_s"] for i in base]) / max(_mean([i["wall_s"] for i in its]), 1e-9),
            "speedup_steady": (_mean([i["wall_s"] for i in base[1:]]) / max(_mean([i["wall_s"] for i in its[1:]]), 1e-9))
            if len(its) > 1 else None,
            "trainer_idle_frac": {"s0": _mean([i["trainer_idle_frac"] for i in base]),
                                  f"s{s}": _mean([i["trainer_idle_frac"] for i in its[1:] or its])},
            "engine_idle_frac": {"s0": _mean([i["engine_idle_frac"] for i in base]),
                                 f"s{s}": _mean([i["engine_idle_frac"] for i in its[1:] or its])},
            "greedy_success": {"s0": runs[0]["greedy_success"], f"s{s}": run["greedy_success"]},
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", type=Path, default=EXAMPLE)
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--staleness", default="0,1", help="comma-separated max_staleness values; 0 must be one")
    ap.add_argument("--correction", default="tis", choices=["none", "tis", "mis", "icepop"])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--smoke", action="store_true", help="toy env + tiny random model, 3 iterations")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "async.json")
    args = ap.parse_args(argv)
    values = sorted({int(x) for x in args.staleness.split(",")})
    if 0 not in values:
        ap.error("--staleness must include 0 (the synchronous baseline)")
    with tempfile.TemporaryDirectory(prefix="agentrl-async-") as tmp:
        if args.smoke:
            sys.path.insert(0, str(ROOT))
            from agentrl.llm.tiny import tiny_model_dir

            args.iterations, args.tiny = 3, tiny_model_dir(Path(tmp) / "tiny")
            args.config = ROOT / "examples" / "gigpo_toy.yaml"
        load = os.getloadavg()
        runs = {s: run_one(s, args, Path(tmp)) for s in values}
    result = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "machine": platform.processor() or
              platform.machine(), "cpus": os.cpu_count(), "loadavg_before": load, "loadavg_after": os.getloadavg(),
              "config": str(args.config.relative_to(ROOT)), "smoke": args.smoke, "device": args.device,
              "correction": args.correction, "iterations": args.iterations,
              "runs": {f"s{s}": r for s, r in runs.items()}, "compare": compare(runs)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result["compare"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Seconds per iteration of a junction-maze LLM cell (issue 51), before vs after its speed-ups.

A cell is ``studies.junction_llm.run_cell`` (``examples/grpo_junction.yaml``: SmolLM2-135M, LoRA on
the top 6 layers, 4 mazes × 8 episodes, Markov prompt, constrained decoding), K = 5, fp32 as the
v2 study pins it. Two settings, each for the GRPO arm and the oracle arm:

- **before**: ``update.sampler_kl_every: 1`` (the trainer re-runs the policy over the trained rows
  each update phase to log ``correction/kl``, 0 by construction for fp32 in one process; since
  issue 51 that recompute runs the update's shared-prefix micro-batches, before it ran every row
  padded — the first committed run of this script, at d2fbc8d, measured that) and the oracle's π
  scored with one ``action_probs`` forward per distinct prompt (``studies.oracle_arm.BATCHED = False``);
- **after**: ``update.sampler_kl_every: 0`` and the oracle's new prompts of a maze scored in one
  ``batch_action_probs`` call (their shared prefix once).

Each (arm, setting) trains ``--iterations`` iterations from the same seed in a fresh run folder,
alternating before/after so a load change on the shared machine hits both alike (``--repeats``
rounds). Both settings sample the same episodes in iteration 1 (same seed, same weights), so its
rollout times compare like for like; later iterations follow their own (equal in distribution)
updates. Reported per run: wall seconds per iteration and the trainer's ``time/rollout_s``,
``time/credit_s`` (the oracle's forwards), ``time/update_s``; per arm the ratio before / after of
the medians. JSON to ``--out``.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/cell_speed.py [--iterations 1] [--repeats 1] \\
        [--arms grpo oracle] [--out benchmarks/results/cell_speed.json] [KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {"before": {"sampler_kl_every": 1, "batched": False}, "after": {"sampler_kl_every": 0, "batched": True}}


def one_run(arm: str, setting: str, iterations: int, out_dir: Path, extra: list[str] = ()) -> dict:
    """Train ``iterations`` iterations of ``arm`` under ``setting`` (``extra``: more config
    overrides); its timings."""
    from studies import oracle_arm
    from studies.junction_llm import run_cell

    s = SETTINGS[setting]
    oracle_arm.BATCHED = s["batched"]
    try:
        t0 = time.perf_counter()
        row = run_cell(arm, 5, 0, iterations, out_dir, "float32",
                       [*extra, f"update.sampler_kl_every={s['sampler_kl_every']}", f"run.name={arm}-{setting}"])
        wall = time.perf_counter() - t0
    finally:
        oracle_arm.BATCHED = True
    metrics = [json.loads(x) for x in (Path(row["run_dir"]) / "metrics.jsonl").read_text().splitlines() if x.strip()]
    per = {k: [m.get(f"time/{k}_s", 0.0) for m in metrics] for k in ("rollout", "credit", "update")}
    return {"arm": arm, "setting": setting, "iterations": iterations, "wall_s": wall,
            "wall_per_iteration_s": wall / iterations, **{f"{k}_s": v for k, v in per.items()},
            "correction_logged": [("correction/kl" in m) for m in metrics],
            "success": [p["success"] for p in row["per_iter"]], "load": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--arms", nargs="+", default=["grpo", "oracle"])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "cell_speed.json")
    ap.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides of every run (e.g. a smaller "
                    "batch for a smoke run)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    import torch

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    runs, t0, load0 = [], time.time(), os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="cell-speed-") as tmp:
        for r in range(args.repeats):
            for arm in args.arms:
                order = ("before", "after") if r % 2 == 0 else ("after", "before")
                for setting in order:
                    runs.append(one_run(arm, setting, args.iterations, Path(tmp) / f"r{r}", args.overrides))
                    print(json.dumps({k: runs[-1][k] for k in ("arm", "setting", "wall_per_iteration_s", "rollout_s",
                                                                "credit_s", "update_s")}), flush=True)
    summary = {}
    for arm in args.arms:
        med = {s: statistics.median(x["wall_per_iteration_s"] for x in runs if x["arm"] == arm and x["setting"] == s)
               for s in SETTINGS}
        parts = {s: {k: statistics.median(sum(x[f"{k}_s"]) / x["iterations"] for x in runs
                                          if x["arm"] == arm and x["setting"] == s) for k in ("rollout", "credit", "update")}
                 for s in SETTINGS}
        summary[arm] = {"before_s_per_iteration": med["before"], "after_s_per_iteration": med["after"],
                        "speedup": med["before"] / med["after"], "parts_s_per_iteration": parts}
    data = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "host": platform.node(),
            "torch": torch.__version__, "threads": 1, "dtype": "float32", "k": 5, "iterations": args.iterations,
            "repeats": args.repeats, "overrides": args.overrides, "load": [load0, os.getloadavg()[0]], "wall_s": time.time() - t0,
            "settings": SETTINGS, "runs": runs, "summary": summary}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()

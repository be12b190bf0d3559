"""Every data-parallel rank rolls out: one iteration of the main job on 1 process vs 2 ranks.

The main job's config (``examples/gigpo_textworld.yaml``: SmolLM2-135M, LoRA, TextWorld cu1,
4 tasks × 4 episodes, admissible-command decoding) for ``--iterations`` iterations, with
per-turn seeds (``rollout.turn_seeds``, so both layouts play the same episodes), 1 torch
thread per process, 1 env worker per process, no evaluation, and the sync probe on
(``rollout.sync_probe: always``: the 1-process engine shares the trained model, so its probe is a
pure cost measurement):

- **1 process × 1 thread**: ``python -m agentrl train``;
- **2 gloo ranks × 1 thread**: ``torchrun --nproc-per-node 2 -m agentrl train``: each rank
  plays 2 of the 4 groups with its own engine copy, rank 0 gathers and stores them.

Read from each run's ``metrics.jsonl``: ``time/rollout_s`` (the iteration's rollout wall time,
on rank 0 including the wait for the slower rank), ``time/update_s``, ``sync/seconds`` and
``sync/probe_s``. Reported: the rollout-time ratio 2 ranks / 1 process (issue 36's bar:
≤ 0.6 on 2 cores), the probe's share of an iteration, and whether the two stores hold the
same episodes of the first iteration (ids, token ids; logprobs within 1e-6). One run, side by
side; absolute seconds depend on the machine and its load (recorded).

Usage: ``python benchmarks/rank_rollout.py [--dtype float32|bfloat16] [--iterations N]
[--smoke] [--out benchmarks/results/rank_rollout.json]``; ``--smoke``: the tiny random model
on the toy env (seconds; the test).
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

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def overrides(args, out_dir: Path, name: str) -> list[str]:
    """The config overrides of one run (the same for both layouts but the name)."""
    common = [f"run.name={name}", f"run.out_dir={out_dir}", f"run.iterations={args.iterations}", "run.eval_every=0",
              "run.eval_before=false", f"run.save_every={args.iterations}", "policy.num_threads=1",
              f"policy.dtype={args.dtype}", "rollout.num_workers=1", "rollout.turn_seeds=true",
              "rollout.sync_probe=always", "log.console=false", "policy.device=cpu"]
    if args.smoke:
        from agentrl.llm.tiny import tiny_model_dir

        tiny = tiny_model_dir(Path(tempfile.gettempdir()) / "agentrl-test-cache")
        common += [f"policy.model={tiny}", "env.id=agentrl/Toy-v0", "policy.lora=null", "policy.max_tokens=8",
                   "rollout.groups_per_iteration=2", "env.eval_panel_size=0"]
    return common + list(args.extra)


def run(args, nproc: int, out_dir: Path, name: str) -> dict:
    """One training run; returns its per-iteration metrics and wall seconds."""
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)] if nproc > 1 else []
    cmd = [sys.executable, *launcher, "-m", "agentrl", "train", str(ROOT / args.config),
           *overrides(args, out_dir, name), "--no-resume"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{name}: rc {proc.returncode}\n{proc.stderr[-4000:]}")
    lines = [json.loads(x) for x in (out_dir / name / "metrics.jsonl").read_text().splitlines()]
    keys = ("time/rollout_s", "time/credit_s", "time/update_s", "sync/seconds", "sync/probe_s",
            "sync/probe_max_abs_diff", "rollout/success_rate", "perf/gen_tokens_per_s")
    return {"wall_s": wall, "iterations": [{k: m.get(k) for k in keys} for m in lines]}


def same_episodes(one: Path, two: Path, name_one: str, name_two: str, per_iteration: int) -> dict:
    """Compare the first iteration's stored episodes of both runs (ids, token ids, logprobs)."""
    from agentrl.store import TurnStore

    def load(path: Path, name: str):
        with TurnStore(path / name / "store.sqlite", readonly=True) as store:
            return [e for e in sorted(store.load_episodes(name), key=lambda e: e.episode_id)
                    if e.episode_id < per_iteration]

    a, b = load(one, name_one), load(two, name_two)
    tokens_equal = len(a) == len(b) and all(
        ea.episode_id == eb.episode_id and len(ea.turns) == len(eb.turns)
        and all(np.array_equal(x.prompt_ids, y.prompt_ids) and np.array_equal(x.completion_ids, y.completion_ids)
                for x, y in zip(ea.turns, eb.turns)) for ea, eb in zip(a, b))
    gap = max((float(np.abs(x.completion_logprobs - y.completion_logprobs).max()) for ea, eb in zip(a, b)
               for x, y in zip(ea.turns, eb.turns) if x.completion_ids.size), default=0.0) if tokens_equal else None
    ranks = sorted({t.info.get("engine_rank") for e in b for t in e.turns})
    return {"episodes": len(a), "ids_and_tokens_equal": tokens_equal, "max_logprob_gap": gap, "ranks_seen": ranks}


def summary(one: dict, two: dict) -> dict:
    """The ratios of the report (rollout time per iteration, the probe's share)."""
    r1 = [m["time/rollout_s"] for m in one["iterations"]]
    r2 = [m["time/rollout_s"] for m in two["iterations"]]

    def share(run: dict) -> float:
        it = [sum(v for k, v in m.items() if k.startswith("time/") and v) + (m["sync/seconds"] or 0.0)
              + (m["sync/probe_s"] or 0.0) for m in run["iterations"]]
        return max((m["sync/probe_s"] or 0.0) / t for m, t in zip(run["iterations"], it))

    return {"rollout_ratio_2ranks_over_1proc": [b / a for a, b in zip(r1, r2)],
            "rollout_ratio_total": sum(r2) / sum(r1),
            "probe_share_of_iteration_max": {"1proc": share(one), "2ranks": share(two)}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="examples/gigpo_textworld.yaml")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--iterations", type=int, default=1)
    ap.add_argument("--smoke", action="store_true", help="tiny random model on the toy env (the test)")
    ap.add_argument("extra", nargs="*", help="more config overrides (key=value) for both runs")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "rank_rollout.json"))
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        one = run(args, 1, out, "one")
        two = run(args, 2, out, "two")
        per_iteration = 8 if args.smoke else 16
        same = same_episodes(out, out, "one", "two", per_iteration)
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "conditions": {"host": platform.node(), "cpus": os.cpu_count(), "load_before": load_before,
                             "load_after": os.getloadavg(), "config": args.config, "dtype": args.dtype,
                             "iterations": args.iterations, "smoke": args.smoke,
                             "threads_per_process": 1, "env_workers_per_process": 1},
              "one_process": one, "two_ranks": two, "same_episodes": same, "summary": summary(one, two)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    s = result["summary"]
    print(f"rollout 2 ranks / 1 process: {s['rollout_ratio_total']:.2f} (per iteration "
          f"{', '.join(f'{x:.2f}' for x in s['rollout_ratio_2ranks_over_1proc'])}); probe share of an iteration "
          f"<= {s['probe_share_of_iteration_max']['1proc']:.2%} (1 process), "
          f"{s['probe_share_of_iteration_max']['2ranks']:.2%} (2 ranks); same episodes: {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Learning benchmark: held-out success before vs after RL, GRPO vs GiGPO at the same budget.

The LEARNING.md setup: SmolLM2-135M-Instruct in bf16, decoding constrained to the
admissible commands, LoRA on the top 6 layers, TextWorld "cu1" (or "cc3") games, groups of
4, one on-policy PPO step per iteration; the prompt is the task, the last 3 actions and the
current observation (``examples/gigpo_textworld.yaml``, which this script loads). For each
env, seed and estimator the script evaluates the packaged model on the held-out panel
(greedy and sampled), trains, evaluates the final checkpoint on the same panel, and writes
everything (success rates, 95 % Wilson intervals, panel hash, wall times, the exact config)
to ``benchmarks/results/learning.json``.

The "before" evaluation does not depend on the estimator: it is computed once per (env,
panel, seed, hash of the env and policy config) and shared by the estimators of that seed
(the greedy one once per (env, panel, hash): greedy decoding ignores the seed). Rows are merged into the JSON by (env,
estimator, seed, iterations, panel), so a grid can be run in pieces; ``--summary`` prints
the Markdown table of what the JSON holds (per-run rows, then means over seeds).

Usage::

    .venv/bin/python benchmarks/learning.py --env cu1 cc3 --seeds 0 1 2 \
        --estimators grpo gigpo --iterations 8 --panel 24
    .venv/bin/python benchmarks/learning.py --summary
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from dataclasses import asdict
from pathlib import Path

ENVS = {"cu1": ("agentrl/TextWorld-CU1-v0", 8), "cc3": ("agentrl/TextWorld-CC3-v0", 10)}
OUT = Path(__file__).parent / "results" / "learning.json"
KEY = ("env", "estimator", "seed", "iterations", "panel")


def _eval(cfg, greedy: bool, checkpoint=None) -> dict:
    from agentrl.eval import evaluate, load_eval_policy

    policy = load_eval_policy(cfg, checkpoint)
    result, _ = evaluate(policy.engine, policy.renderer, cfg, greedy=greedy)
    return asdict(result)


def _cached(path: Path, compute) -> tuple[dict, float]:
    """(result, seconds spent now): read ``path`` when present, else compute and write it."""
    if path.is_file():
        return json.loads(path.read_text()), 0.0
    t0 = time.perf_counter()
    out = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, default=float))
    return out, time.perf_counter() - t0


def config_for(env: str, estimator: str, seed: int, iterations: int, panel: int, out_dir: Path):
    """The training config of one grid cell (the example config + the benchmark's budget)."""
    from agentrl.config import load_config

    env_id, max_turns = ENVS[env]
    overrides = [f"run.name=learning-{env}-{estimator}-s{seed}", f"run.out_dir={out_dir}", f"run.seed={seed}",
                 f"run.iterations={iterations}", "run.eval_every=0", f"run.save_every={iterations}",
                 "run.eval_before=false", f"run.eval_seed={seed}",  # this script evaluates before/after itself
                 f"env.id={env_id}", f"env.max_turns={max_turns}", f"env.eval_panel_size={panel}",
                 "rollout.groups_per_iteration=6", "rollout.group_size=4", f"algorithm.estimator={estimator}",
                 "algorithm.kwargs={}", "log.console=false"]
    return load_config(Path(__file__).parents[1] / "examples" / "gigpo_textworld.yaml", overrides)


def run_one(env: str, estimator: str, seed: int, iterations: int, panel: int, out_dir: Path) -> dict:
    """Before-eval (cached per env/panel/seed), training, after-eval of one (env, estimator, seed)."""
    from agentrl.config import to_dict
    from agentrl.train import train

    cfg = config_for(env, estimator, seed, iterations, panel, out_dir)
    d = to_dict(cfg)  # the cache key: everything the before-eval depends on (env and policy sections)
    tag = hashlib.sha256(json.dumps({"env": d["env"], "policy": d["policy"]}, sort_keys=True).encode()).hexdigest()[:10]
    cache = out_dir / "before"
    greedy_b, s_gb = _cached(cache / f"{env}-p{panel}-{tag}-greedy.json", lambda: _eval(cfg, True))
    sampled_b, s_sb = _cached(cache / f"{env}-p{panel}-{tag}-s{seed}-sampled.json", lambda: _eval(cfg, False))
    t1 = time.perf_counter()
    result = train(cfg, resume=False)
    t2 = time.perf_counter()
    ckpt = result.run_dir / "checkpoints" / (result.run_dir / "checkpoints" / "latest").read_text().strip()
    after = {"greedy": _eval(cfg, True, ckpt), "sampled": _eval(cfg, False, ckpt)}
    t3 = time.perf_counter()
    return {"env": env, "estimator": estimator, "seed": seed, "iterations": iterations, "panel": panel,
            "optimizer_steps": result.state.optimizer_steps, "before": {"greedy": greedy_b, "sampled": sampled_b},
            "after": after,
            "seconds": {"eval_before": s_gb + s_sb, "train": t2 - t1, "eval_after": t3 - t2,
                        "total_with_before": (t3 - t1) + s_gb + s_sb},
            "config": to_dict(cfg)}


def merge(rows: list[dict], row: dict) -> list[dict]:
    """``rows`` with ``row`` replacing any row of the same (env, estimator, seed, iterations, panel)."""
    key = tuple(row.get(k) for k in KEY)
    return [r for r in rows if tuple(r.get(k) for k in KEY) != key] + [row]


def pct(r: dict) -> str:
    """'62.5% [43%, 79%] (15/24)': success rate, 95 % Wilson interval, counts of an EvalResult dict."""
    lo, hi = r["wilson"]
    return f"{r['success_rate']:.1%} [{lo:.0%}, {hi:.0%}] ({r['successes']}/{r['n']})"


def summary(rows: list[dict]) -> str:
    """Markdown: one line per run, then mean ± sd of the greedy/sampled rise over seeds."""
    import numpy as np

    lines = ["| env | estimator | seed | greedy before | greedy after | sampled before | sampled after | "
             "turns (greedy) | wall (train + after-eval) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["env"], r["estimator"], r["seed"])):
        b, a = r["before"], r["after"]
        wall = r["seconds"]["train"] + r["seconds"]["eval_after"]
        lines.append(f"| {r['env']} | {r['estimator']} | {r['seed']} | {pct(b['greedy'])} | {pct(a['greedy'])} | "
                     f"{pct(b['sampled'])} | {pct(a['sampled'])} | {b['greedy']['mean_turns']:.2f} → "
                     f"{a['greedy']['mean_turns']:.2f} | {wall:.0f} s |")
    lines += ["", "| env | estimator | seeds | greedy after (mean) | greedy rise (mean ± sd, points) | "
              "sampled rise (mean ± sd, points) |", "|---|---|---|---|---|---|"]
    cells = sorted({(r["env"], r["estimator"]) for r in rows})
    for env, est in cells:
        rs = [r for r in rows if r["env"] == env and r["estimator"] == est]
        g = np.array([100 * (r["after"]["greedy"]["success_rate"] - r["before"]["greedy"]["success_rate"]) for r in rs])
        s = np.array([100 * (r["after"]["sampled"]["success_rate"] - r["before"]["sampled"]["success_rate"]) for r in rs])
        after = np.mean([r["after"]["greedy"]["success_rate"] for r in rs])
        sd = (lambda x: f"{x.std(ddof=1):.1f}" if x.size > 1 else "–")
        lines.append(f"| {env} | {est} | {len(rs)} | {after:.1%} | {g.mean():+.1f} ± {sd(g)} | {s.mean():+.1f} ± {sd(s)} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", nargs="+", choices=sorted(ENVS), default=["cu1"])
    ap.add_argument("--estimators", nargs="+", default=["grpo", "gigpo"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--panel", type=int, default=24, help="held-out tasks (default: 24)")
    ap.add_argument("--out-dir", default="runs/learning")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--summary", action="store_true", help="print the Markdown table of --out and exit")
    args = ap.parse_args()
    out = Path(args.out)
    rows = json.loads(out.read_text())["runs"] if out.is_file() else []
    if args.summary:
        print(summary(rows))
        return
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    for env in args.env:
        for seed in args.seeds:
            for est in args.estimators:
                row = run_one(env, est, seed, args.iterations, args.panel, Path(args.out_dir))
                rows = merge(rows, row)
                b, a = row["before"], row["after"]
                print(f"{env} {est} seed {seed}: greedy {b['greedy']['success_rate']:.1%} -> "
                      f"{a['greedy']['success_rate']:.1%}, sampled {b['sampled']['success_rate']:.1%} -> "
                      f"{a['sampled']['success_rate']:.1%}, train {row['seconds']['train']:.0f} s", flush=True)
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps({"runs": rows}, indent=1, default=float))


if __name__ == "__main__":
    main()

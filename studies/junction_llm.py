"""The pre-registered LLM comparison on the junction maze (issue 38): GRPO, GiGPO, G2PO and an
oracle trained on the exact advantages, SmolLM2-135M-Instruct, K = 5 and the K = 1 control.

The rule (studies/results/junction_llm.md, "LLM comparison — rule fixed before any pilot result is read"):
groups of 8 × 4 mazes per iteration, ``examples/grpo_junction.yaml`` for every arm (Markov
prompt, decoding constrained to the admissible actions, LoRA top 6 layers, one PPO step per
iteration). **Primary endpoint:** first-junction accuracy averaged over the training iterations
(share of an iteration's episodes whose first exit taken at junction 1 leads on;
``oracle_arm.junction_stats``). Secondary: greedy success on a 256-maze held-out panel (eval
split) after training (``--evaluate``, run separately on the cells' final checkpoints). Pilot:
seeds 0–2; then ``n = ceil((2.8 s / 10)^2)`` seeds in all, s = the pilot's paired SD of
G2PO − GRPO on the primary endpoint at K = 5, at least 3, at most 20 (more than 20: the pilot is
reported as underpowered). K = 1 is read as an equivalence interval (±5 points).

Arms: ``grpo``, ``gigpo`` (registry defaults), ``g2po`` (``success_reward`` 1: the maze pays 1 for a
win), ``oracle`` (``oracle_arm.ORACLE``: raw exact A^π of the sampling policy, from one forward of
the live model per distinct prompt). Each cell's per-iteration endpoints come from the episodes
the trainer collected (``oracle_arm.capture``), so the cells need no evaluation to be read.

Each cell runs on ``studies.runner`` (run folder ``studies/runs/junction_llm/<key>/``, resumed when run
again after an interruption; result ``studies/results/junction_llm/<key>.json``); ``results/junction_llm.json``
is the pilot's merged JSON from before the runner, kept as written and read with the cells by ``--summary``.

Usage::

    OMP_NUM_THREADS=1 .venv/bin/python -m studies.junction_llm --ks 5 1 --seeds 0 --arms grpo gigpo g2po oracle
    .venv/bin/python -m studies.runner --study junction_llm --left        # every grid cell without a result
    .venv/bin/python -m studies.junction_llm --evaluate --panel 256       # the secondary endpoint, per cell
    .venv/bin/python -m studies.junction_llm --summary                    # tables, paired differences, the rule
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import time
from pathlib import Path

import numpy as np

from studies.learning import DTYPES
from studies.runner import ROOT, Cell, Study, finished, result_path
from studies.runner import run_cell as run_on_runner

ITERS = "junction_iters.jsonl"  #: per-iteration endpoints in a cell's run folder
OUT = Path(__file__).parent / "results" / "junction_llm.json"
ARMS = {"grpo": ("grpo", {}), "gigpo": ("gigpo", {}), "g2po": ("g2po", {"success_reward": 1.0}),
        "oracle": ("exact_oracle", {})}
#: arms other studies train with ``run_cell`` (not in this study's grid): BEACON (the maze pays 1 per
#: milestone-bearing win), OPRL (its PRM as ``examples/oprl_junction.yaml``; studies/paraphrase_learning.py) and
#: GraphGPO (the win's goal worth 1, gamma 0.95, as studies/credit_fidelity.py; studies/junction_llm_v2.py)
MORE_ARMS = {"beacon": ("beacon", {"milestone_reward": 1.0}), "oprl": ("oprl", {}),
             "graphgpo": ("graphgpo", {"goal_value": 1.0, "gamma": 0.95})}
KEY = ("arm", "k", "seed", "iterations", "dtype")
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
T_95 = {1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132, 5: 2.015, 6: 1.943, 7: 1.895, 8: 1.860, 9: 1.833}


def config_for(arm: str, k: int, seed: int, iterations: int, out_dir: Path, dtype: str, extra: list[str] = ()):
    """The cell's config: ``examples/grpo_junction.yaml`` + the arm's estimator and kwargs, K
    junctions, ``iterations`` iterations, no in-training evaluation, the final checkpoint saved."""
    from agentrl.train.checks import load_checked_config

    est, kw = ARMS[arm] if arm in ARMS else MORE_ARMS[arm]
    overrides = [f"run.name=jllm-k{k}-{arm}-s{seed}", f"run.out_dir={out_dir}", f"run.seed={seed}",
                 f"run.iterations={iterations}", "run.eval_every=0", "run.eval_before=false",
                 f"run.save_every={iterations}", f"env.kwargs={json.dumps({'k': k})}", f"policy.dtype={dtype}",
                 f"algorithm.estimator={est}", f"algorithm.kwargs={json.dumps(kw)}", "log.console=false", *extra]
    return load_checked_config(Path(__file__).parents[1] / "examples" / "grpo_junction.yaml", overrides)


def run_cell(arm: str, k: int, seed: int, iterations: int, out_dir: Path, dtype: str, extra: list[str] = ()) -> dict:
    """Train (or resume) one cell; its row: per-iteration endpoints, the primary endpoint, the logged
    credit metrics, the oracle's checks (prompt mismatches must be 0; of this session's iterations),
    condition and wall time. The endpoints of each iteration are appended to the run folder's
    ``junction_iters.jsonl`` as it is collected, so a resumed cell keeps those of the earlier sessions."""
    from studies.oracle_arm import capture, oracle_registered
    from studies.learning import _condition

    from agentrl.config import to_dict
    from agentrl.train import train

    with oracle_registered():
        cfg = config_for(arm, k, seed, iterations, out_dir, dtype, extra)
        start, t0 = _condition(), time.perf_counter()
        iters = Path(cfg.run.out_dir) / cfg.run.name / ITERS
        with capture(cfg, on_iter=lambda it, stats: _append(iters, {"iteration": it + 1, **stats})) as live:
            result = train(cfg, resume=True)
    seconds = time.perf_counter() - t0
    metrics = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    ckpt = result.run_dir / "checkpoints" / (result.run_dir / "checkpoints" / "latest").read_text().strip()
    logged = {d["iteration"]: d for d in map(json.loads, iters.read_text().splitlines())}  # a replayed one: the last
    per = [{k: v for k, v in logged[i].items() if k != "iteration"} for i in range(1, result.state.iteration + 1)]
    return {"arm": arm, "k": k, "seed": seed, "iterations": iterations, "dtype": dtype, "per_iter": per,
            "primary": float(np.mean([p["first_junction_right"] for p in per])),
            "success_mean": float(np.mean([p["success"] for p in per])),
            "zero_adv": [m.get("adv/zero_frac") for m in metrics], "update_steps": result.state.optimizer_steps,
            "oracle_checks": live.oracle_checks, "checkpoint": str(ckpt), "run_dir": str(result.run_dir),
            "seconds": seconds, "condition": {"start": start, "end": _condition()}, "config": to_dict(cfg)}


def _append(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(record, default=float) + "\n")


def make_cell(arm: str, k: int, seed: int, iterations: int = 8, dtype: str = "bfloat16", extra: tuple[str, ...] = ()) -> Cell:
    """The runner's cell of one (arm, K, seed): key e.g. ``k5-grpo-bf16-s0`` (``-i4`` for another
    budget; ``-x<hash>`` for extra overrides)."""
    key = f"k{k}-{arm}-{DTYPES[dtype]}-s{seed}" + (f"-i{iterations}" if iterations != 8 else "") + (
        "-x" + hashlib.sha256(json.dumps(list(extra)).encode()).hexdigest()[:8] if extra else "")
    return Cell("junction_llm", key, {"arm": arm, "k": k, "iterations": iterations, "dtype": dtype, "extra": list(extra)}, seed)


def grid(root: Path = ROOT) -> list[Cell]:
    """The pre-registered comparison: every arm at K = 5 and 1, seeds 0-2 (the rule's n = 3), bf16."""
    return [make_cell(arm, k, seed) for k in (5, 1) for seed in (0, 1, 2) for arm in ARMS]


def _run(cell: Cell, run_dir: Path) -> dict:
    c = cell.config
    return run_cell(c["arm"], c["k"], cell.seed, c["iterations"], run_dir.parent, c["dtype"],
                    [*c["extra"], f"run.name={run_dir.name}", "run.save_every=1"])


def historical(cell: Cell) -> str | None:
    """'junction_llm.json' when the merged JSON of the pilot (before the runner) holds the cell's row."""
    c = cell.config
    if c["extra"] or not OUT.is_file():
        return None
    rows = json.loads(OUT.read_text())["runs"]
    return "junction_llm.json (before the runner)" if any(row_key(r) == (c["arm"], c["k"], cell.seed, c["iterations"],
                                                                      c["dtype"]) for r in rows) else None


def all_rows(out: Path, root: Path = ROOT) -> list[dict]:
    """``out``'s rows (the pilot's merged JSON) with the runner's finished cells under ``root``
    merged in (a cell replaces the merged row of the same ``row_key``; cells with extra overrides left out)."""
    rows = json.loads(out.read_text())["runs"] if out.is_file() else []
    for record in finished(root, "junction_llm"):
        if not record["config"]["extra"]:
            rows = merge(rows, record["row"])
    return rows


def evaluate_row(row: dict, panel: int) -> dict:
    """Greedy success of the row's final checkpoint on the first ``panel`` eval-split mazes, under the
    config its run wrote (``run_dir/config.yaml``: the cell's overrides included)."""
    from dataclasses import asdict

    from studies.oracle_arm import oracle_registered

    from agentrl.eval import evaluate, load_eval_policy
    from agentrl.train.checks import load_checked_config

    with oracle_registered():  # an oracle row's config names exact_oracle
        cfg = load_checked_config(Path(row["run_dir"]) / "config.yaml", [f"env.eval_panel_size={panel}"])
    policy = load_eval_policy(cfg, row["checkpoint"])
    res, _ = evaluate(policy.engine, policy.renderer, cfg, greedy=True)
    return {k: v for k, v in asdict(res).items() if k in ("n", "successes", "success_rate", "panel_sha256", "outcomes")}


def row_key(r: dict) -> tuple:
    return tuple(r[k] for k in KEY)


def merge(rows: list[dict], new: dict) -> list[dict]:
    return [r for r in rows if row_key(r) != row_key(new)] + [new]


def paired(rows: list[dict], arm: str, k: int, base: str = "grpo", field: str = "primary") -> dict | None:
    """Per-seed paired differences ``arm − base`` (points) of ``field`` at ``k``: mean, SD, 95 % t
    interval and 90 % t interval (the equivalence reading), seeds both arms have."""
    a = {r["seed"]: r[field] for r in rows if r["arm"] == arm and r["k"] == k and r.get(field) is not None}
    b = {r["seed"]: r[field] for r in rows if r["arm"] == base and r["k"] == k and r.get(field) is not None}
    seeds = sorted(set(a) & set(b))
    if len(seeds) < 2:
        return None
    d = 100 * np.array([a[s] - b[s] for s in seeds])
    sd, df = float(d.std(ddof=1)), len(seeds) - 1
    se = sd / math.sqrt(len(seeds))
    t95, t90 = T_975.get(df, 1.96), T_95.get(df, 1.645)
    return {"n": len(seeds), "mean": float(d.mean()), "sd": sd, "ci95": (d.mean() - t95 * se, d.mean() + t95 * se),
            "ci90": (d.mean() - t90 * se, d.mean() + t90 * se), "diffs": d.tolist()}


def seeds_needed(sd: float) -> int:
    """The rule: ceil((2.8 s / 10)^2) seeds in all, at least 3 (the caller reports > 20 as underpowered)."""
    return max(3, math.ceil((2.8 * sd / 10) ** 2))


def summary(rows: list[dict]) -> str:
    """Markdown: per (K, arm) the primary endpoint per seed and its mean, mean training success,
    the secondary endpoint where evaluated; paired differences from GRPO; the rule's reading."""
    lines = ["| K | arm | seeds | first-junction accuracy, per seed (mean over iterations) | mean | "
             "training success (mean) | greedy panel success after | wall s / cell |", "|---|---|---|---|---|---|---|---|"]
    for k in sorted({r["k"] for r in rows}, reverse=True):
        for arm in ARMS:
            rs = sorted((r for r in rows if r["arm"] == arm and r["k"] == k), key=lambda r: r["seed"])
            if not rs:
                continue
            per = " / ".join(f"{100 * r['primary']:.1f}" for r in rs)
            ev = [r["eval"]["success_rate"] for r in rs if r.get("eval")]
            evs = f"{100 * np.mean(ev):.1f} % (n = {len(ev)} × {rs[0]['eval']['n']})" if ev else "–"
            lines.append(f"| {k} | {arm} | {len(rs)} | {per} | {100 * np.mean([r['primary'] for r in rs]):.1f} % | "
                         f"{100 * np.mean([r['success_mean'] for r in rs]):.1f} % | {evs} | "
                         f"{np.mean([r['seconds'] for r in rs]):.0f} |")
    lines += ["", "| K | arm − GRPO (points, primary) | seeds | mean | SD | 95 % t interval | 90 % t interval |",
              "|---|---|---|---|---|---|---|"]
    for k in sorted({r["k"] for r in rows}, reverse=True):
        for arm in [a for a in ARMS if a != "grpo"]:
            p = paired(rows, arm, k)
            if p:
                lines.append(f"| {k} | {arm} | {p['n']} | {p['mean']:+.1f} | {p['sd']:.1f} | [{p['ci95'][0]:+.1f}, "
                             f"{p['ci95'][1]:+.1f}] | [{p['ci90'][0]:+.1f}, {p['ci90'][1]:+.1f}] |")
    p = paired(rows, "g2po", 5)
    if p:
        n = seeds_needed(p["sd"])
        verdict = (f"{n} seeds in all" if n <= 20 else f"{n} > 20 seeds: the pilot is reported as underpowered")
        lines += ["", f"Rule: s (SD of G2PO − GRPO at K = 5, primary) = {p['sd']:.1f} points over {p['n']} seeds → "
                      f"n = ceil((2.8 · {p['sd']:.1f} / 10)^2) → {verdict}."]
    q = paired(rows, "g2po", 1)
    if q:
        inside = -5 <= q["ci90"][0] and q["ci90"][1] <= 5
        lines.append(f"K = 1 equivalence (G2PO − GRPO, 90 % interval within ±5 points): [{q['ci90'][0]:+.1f}, "
                     f"{q['ci90'][1]:+.1f}] → {'equivalent' if inside else 'not shown equivalent'}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """The command line (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    ap.add_argument("--ks", nargs="+", type=int, default=[5, 1])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--dtype", choices=["auto", "bfloat16", "float32"], default="auto")
    ap.add_argument("--out", default=str(OUT), help="the pilot's merged JSON (before the runner; read with the "
                    "finished cells by --summary, written by --merge)")
    ap.add_argument("--root", type=Path, default=ROOT, help="the runner's folder: run folders in ROOT/runs/junction_llm, "
                    "one result file per finished cell in ROOT/results/junction_llm (default: studies/)")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="extra config overrides (smoke tests)")
    ap.add_argument("--merge", nargs="+", metavar="JSON", help="merge these --out files' rows into --out and exit")
    ap.add_argument("--evaluate", action="store_true", help="greedy panel success of every row of --out without one")
    ap.add_argument("--panel", type=int, default=256)
    ap.add_argument("--summary", action="store_true")
    args = ap.parse_args(argv)
    out = Path(args.out)
    data = json.loads(out.read_text()) if out.is_file() else {"runs": []}
    if args.summary:
        print(summary(all_rows(out, args.root)))
        return
    if args.merge:
        for f in args.merge:
            for row in json.loads(Path(f).read_text())["runs"]:
                data["runs"] = merge(data["runs"], row)
        out.write_text(json.dumps(data, indent=1, default=float))
        print(f"{len(data['runs'])} rows in {out}")
        return
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.evaluate:
        for row in data["runs"]:
            if not row.get("eval") and Path(row["checkpoint"]).exists():
                row["eval"] = evaluate_row(row, args.panel)
                print(f"K={row['k']} {row['arm']} seed {row['seed']}: greedy {row['eval']['success_rate']:.1%}", flush=True)
                out.write_text(json.dumps(data, indent=1, default=float))
        for record in finished(args.root, "junction_llm"):  # the runner's cells: into their own result files
            row = record["row"]
            if not row.get("eval") and Path(row["checkpoint"]).exists():
                row["eval"] = evaluate_row(row, args.panel)
                print(f"{record['key']}: greedy {row['eval']['success_rate']:.1%}", flush=True)
                path = result_path(args.root, Cell("junction_llm", record["key"], record["config"], record["seed"]))
                path.write_text(json.dumps(record, indent=1, default=float))
        return
    from studies.learning import auto_dtype

    dtype = auto_dtype() if args.dtype == "auto" else args.dtype
    for k in args.ks:
        for seed in args.seeds:
            for arm in args.arms:
                cell = make_cell(arm, k, seed, args.iterations, dtype, tuple(args.set))
                row = run_on_runner(STUDY, cell, args.root)["row"]
                print(f"K={k} {arm} seed {seed}: first-junction {row['primary']:.1%}, success {row['success_mean']:.1%} "
                      f"({row['seconds']:.0f} s); {cell.key}", flush=True)


STUDY = Study("junction_llm", grid, _run, historical)

if __name__ == "__main__":
    main()

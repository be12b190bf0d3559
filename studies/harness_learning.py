"""Issue 53: an unmodified agent framework trained through the recording proxy, held-out before and after.

A cell trains one shipped harness config (``examples/<config>.yaml``: the framework's program, the env,
the budget) with the real trainer in the runner's run folder, a checkpoint every iteration (so a cell
longer than a session resumes), and evaluates the held-out panel greedily before the first iteration
and after the last (``run.eval_before``, ``run.eval_every`` = iterations) through the same harness. Its
row, read back from the run folder so a resumed cell reports every launch's iterations:

- ``before`` / ``after``: ``{"success", "n", "failed", "outcomes": {task_id: 0 | 1}}`` of the two
  evaluations (the store's ``<run>/eval-before`` and ``<run>/eval-iter<N>`` episodes; the latest of
  each when a launch repeated one), and ``paired``: ``agentrl.eval.compare``'s after − before paired
  by game (95 % bootstrap over games, games newly won / lost);
- ``per_iter``: each iteration's training success, ``proxy/logprob_corr`` and ``proxy/logprob_mae``
  (the trainer's recompute of the proxy's recorded logprobs, over trained tokens; absent on an
  iteration that did not update), forks and calls (turns), excluded episodes — from ``metrics.jsonl``;
- ``minutes``: every launch's wall time (the run folder's ``launches.jsonl`` start to the result).

**The rule, written before the pilot ran (2026-12-07).** The pilot is seed 0 of
``harness_agents_textworld`` (the OpenAI Agents SDK on TextWorld coin collector 3, 8 iterations of
6 × 4 episodes: the budget at which the plain ``openai``-SDK agent learned, RESULTS.md). If the pilot's
held-out gain is at least +2 games of 16 (+12.5 points), seeds 1 and 2 run (``SEEDS_AFTER_PILOT``) and the
reading is the pooled after − before over the 48 (seed, game) pairs with a bootstrap over games
within seeds; otherwise the pilot is reported alone as "no gain at this budget" and no seed is added.
``grid`` reads the pilot's result to apply it.

Usage::

    .venv/bin/python -m studies.runner --study harness_learning --left
    .venv/bin/python -m studies.harness_learning --summary
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from pathlib import Path

import numpy as np

from studies.runner import ROOT, Cell, Study, result_path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PILOT = "harness_agents_textworld"  #: the framework config the rule is about
SEEDS_AFTER_PILOT = (1, 2)
GAIN_TO_GO_ON = 2  #: held-out games newly won, net, that the pilot must show for seeds 1 and 2 to run
SUCCESS = "success"
PER_ITER = {"success": "rollout/success_rate", "logprob_corr": "proxy/logprob_corr", "logprob_mae": "proxy/logprob_mae",
            "forks": "proxy/forks", "turns": "rollout/turns", "excluded": "rollout/episodes_excluded",
            "rollout_s": "time/rollout_s", "update_s": "time/update_s"}


def make_cell(config: str, seed: int) -> Cell:
    """The cell of one shipped harness config and seed: key e.g. ``harness_agents_textworld-s0``."""
    if not (EXAMPLES / f"{config}.yaml").is_file():
        raise ValueError(f"no examples/{config}.yaml: a harness_learning cell trains a shipped example config")
    return Cell("harness_learning", f"{config}-s{seed}", {"config": config}, seed)


def grid(root: Path = ROOT) -> list[Cell]:
    """The pilot, then seeds 1 and 2 when the pilot's result meets the rule (module docstring)."""
    pilot = make_cell(PILOT, 0)
    cells = [pilot]
    path = result_path(root, pilot)
    if path.is_file():
        paired = json.loads(path.read_text())["row"]["paired"]
        if paired["gained"] - paired["lost"] >= GAIN_TO_GO_ON:
            cells += [make_cell(PILOT, s) for s in SEEDS_AFTER_PILOT]
    return cells


def config_for(config: str, seed: int, out_dir: Path, name: str, extra: tuple[str, ...] = ()):
    """The cell's training config: the example as shipped, its seed, a checkpoint every iteration, held-out
    evaluation before and after the last iteration only."""
    from agentrl.train.checks import load_checked_config

    path = EXAMPLES / f"{config}.yaml"
    base = load_checked_config(path)
    overrides = [f"run.name={name}", f"run.out_dir={out_dir}", f"run.seed={seed}", "run.save_every=1",
                 "run.eval_before=true", f"run.eval_every={base.run.iterations}", "log.console=false", *extra]
    return load_checked_config(path, overrides)


def eval_summary(store, run_prefix: str, when: str) -> dict | None:
    """The held-out evaluation ``<run_prefix>/eval-<when>`` (the latest launch's: ``-2``, ``-3`` ... when
    repeated) as ``{"run_id", "success", "n", "failed", "outcomes": {task_id: 0.0 | 1.0}}``; None if absent."""
    from agentrl.types import EpisodeStatus

    base = f"{run_prefix}/eval-{when}"
    runs = [r for r in store.runs() if r == base or (r.startswith(base + "-") and r[len(base) + 1:].isdigit())]
    if not runs:
        return None
    run_id = max(runs, key=lambda r: 1 if r == base else int(r.rsplit("-", 1)[1]))
    episodes = store.load_episodes(run_id)
    ok = [e for e in episodes if e.status == EpisodeStatus.OK]
    outcomes = {e.task_id: float(e.success) for e in ok}
    return {"run_id": run_id, "success": float(np.mean(list(outcomes.values()))) if ok else float("nan"),
            "n": len(ok), "failed": len(episodes) - len(ok), "outcomes": outcomes}


def _diffs(before: dict, after: dict) -> np.ndarray:
    """after − before per game both evaluations scored, float64 [n_shared], in ``before``'s order."""
    b, a = before["outcomes"], after["outcomes"]
    return np.array([a[t] - b[t] for t in b if t in a], dtype=np.float64)


def paired(before: dict, after: dict, n_boot: int = 4000, seed: int = 0) -> dict:
    """after − before over the games both scored: the mean, a 95 % bootstrap over games, games gained and lost."""
    from agentrl.eval import bootstrap_interval

    d = _diffs(before, after)
    return {"diff": float(d.mean()) if d.size else float("nan"),
            "interval": list(bootstrap_interval(d, n_boot=n_boot, seed=seed)),
            "n": int(d.size), "gained": int((d > 0).sum()), "lost": int((d < 0).sum())}


def pooled(rows: list[dict], n_boot: int = 4000, seed: int = 0) -> dict:
    """after − before pooled over every (seed, game) pair of ``rows`` (cell rows of one config, ``cell_row``):
    the mean over pairs and a 95 % percentile bootstrap that resamples games *within* each seed (each seed keeps
    its number of games, so a seed's pairs stay together), with the games gained and lost summed over seeds.

    Returns ``{"diff", "interval": [lo, hi], "n" (pairs), "seeds", "gained", "lost"}``; ``diff`` and the
    interval are fractions (×100 for points), NaN when no pair is shared."""
    per_seed = [d for d in (_diffs(r["before"], r["after"]) for r in rows) if d.size]
    if not per_seed:
        return {"diff": float("nan"), "interval": [float("nan"), float("nan")], "n": 0, "seeds": 0,
                "gained": 0, "lost": 0}
    rng = np.random.default_rng(seed)
    total = sum(d.size for d in per_seed)
    sums = sum(d[rng.integers(0, d.size, size=(n_boot, d.size))].sum(axis=1) for d in per_seed)
    boot = sums / total
    alld = np.concatenate(per_seed)
    return {"diff": float(alld.mean()), "interval": [float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))],
            "n": int(total), "seeds": len(per_seed), "gained": int((alld > 0).sum()), "lost": int((alld < 0).sum())}


def per_iteration(metrics: list[dict], launch_starts: tuple[float, ...] = ()) -> list[dict]:
    """Per training iteration (step ≥ 1 of ``metrics.jsonl``; a replayed iteration: its last record) the
    ``PER_ITER`` values (None where not logged, e.g. ``logprob_corr`` of an iteration without an update) and
    ``seconds``: wall time since the record of the iteration before (None when a launch started between the
    two, ``launch_starts`` in epoch seconds: that span holds the downtime and the restart; the last iteration's
    includes the held-out evaluation after it)."""
    last = {int(m["step"]): m for m in metrics if int(m.get("step", 0)) >= 0}
    rows = []
    for it in sorted(k for k in last if k >= 1):
        prev = last.get(it - 1)
        span = None if prev is None else (prev["time"], last[it]["time"])
        restarted = span is not None and any(span[0] < t < span[1] for t in launch_starts)
        rows.append({"iteration": it, **{k: last[it].get(v) for k, v in PER_ITER.items()},
                     "seconds": None if span is None or restarted else span[1] - span[0]})
    return rows


def cell_row(run_dir: Path, config: str, seed: int, iterations: int) -> dict:
    """The cell's row from its run folder (module docstring)."""
    from agentrl.store import TurnStore

    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    store = TurnStore(run_dir / "store.sqlite", readonly=True)
    try:
        before, after = eval_summary(store, run_dir.name, "before"), eval_summary(store, run_dir.name,
                                                                                  f"iter{iterations}")
    finally:
        store.close()
    if before is None or after is None:
        raise RuntimeError(f"{run_dir}: the held-out evaluation {'before' if before is None else 'after'} training "
                           "is not in the store; run the cell again to finish it")
    launches = [json.loads(line) for line in (run_dir / "launches.jsonl").read_text().splitlines() if line.strip()] \
        if (run_dir / "launches.jsonl").is_file() else []
    starts = tuple(datetime.strptime(x["started"], "%Y-%m-%dT%H:%M:%S%z").timestamp() for x in launches)
    per = per_iteration(metrics, starts)
    timed = [x["seconds"] for x in per if x["seconds"] is not None]
    return {"config": config, "seed": seed, "iterations": iterations, "before": before, "after": after,
            "paired": paired(before, after), "per_iter": per, "launches": len(launches),
            "iteration_seconds_median": float(np.median(timed)) if timed else None}


def _run(cell: Cell, run_dir: Path) -> dict:
    from agentrl.train import train

    cfg = config_for(cell.config["config"], cell.seed, run_dir.parent, run_dir.name)
    train(cfg, resume=True)
    return cell_row(run_dir, cell.config["config"], cell.seed, cfg.run.iterations)


STUDY = Study("harness_learning", grid, _run)


def summary(root: Path = ROOT) -> str:
    """A markdown table of the finished cells: before → after, the paired interval, logprob agreement, forks;
    under it, for each config with more than one finished seed, the pooled reading (``pooled``)."""
    rows: dict[str, list[dict]] = {}
    lines = ["| cell | held-out before → after | after − before, paired 95 % | games won / lost | "
             "training success per iteration | `proxy/logprob_corr` min | forks / calls |", "|---" * 7 + "|"]
    for path in sorted((Path(root) / "results" / "harness_learning").glob("*.json")):
        r = json.loads(path.read_text())["row"]
        rows.setdefault(r.get("config", path.stem.rsplit("-s", 1)[0]), []).append(r)
        p, it = r["paired"], r["per_iter"]
        corr = [x["logprob_corr"] for x in it if x["logprob_corr"] is not None]
        lines.append(
            f"| {path.stem} | {r['before']['success']:.1%} → {r['after']['success']:.1%} (n {p['n']}) | "
            f"{p['diff'] * 100:+.1f} [{p['interval'][0] * 100:+.1f}, {p['interval'][1] * 100:+.1f}] | "
            f"{p['gained']} / {p['lost']} | {' / '.join(f'{x[SUCCESS] * 100:.0f}' for x in it)} % | "
            f"{min(corr) if corr else float('nan'):.4f} | "
            f"{sum(x['forks'] or 0 for x in it):.0f} / {sum(x['turns'] or 0 for x in it):.0f} |")
    for config, rs in rows.items():
        if len(rs) > 1:
            q = pooled(rs)
            lines.append(f"\n{config}, pooled over {q['n']} (seed, game) pairs of {q['seeds']} seeds: after − before "
                         f"{q['diff'] * 100:+.1f} points, 95 % [{q['interval'][0] * 100:+.1f}, "
                         f"{q['interval'][1] * 100:+.1f}] (games resampled within seeds), {q['gained']} won / "
                         f"{q['lost']} lost")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--summary", action="store_true", help="print the finished cells' table")
    ap.add_argument("--root", type=Path, default=ROOT)
    args = ap.parse_args()
    if args.summary:
        print(summary(args.root))
    else:
        ap.print_help()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

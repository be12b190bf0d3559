"""Issue 51's LLM study, read back: the calibration table, the study table under the rule, and the
learning curves (PNG) — from the runner's result files of ``junction_llm_v2`` alone.

Usage::

    .venv/bin/python -m studies.junction_llm_v2_report             # both tables (markdown)
    .venv/bin/python -m studies.junction_llm_v2_report --plot      # + results/junction_llm_v2*.png
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from studies import junction_llm_v2 as v2
from studies.junction_llm import paired
from studies.runner import ROOT, finished

COLORS = {"grpo": "tab:gray", "g2po": "tab:blue", "graphgpo": "tab:green", "oracle": "tab:red"}


def condition(result: dict) -> tuple[int, int, int, int, int]:
    """(K, exits, hinted, groups, size) of a result file."""
    c = result["config"]
    return c["k"], c["exits"], c["hinted"], c["groups"], c["size"]


def paired_mazes(a: dict, b: dict) -> dict:
    """``a − b`` (points) of greedy success on the same panel, paired by maze: the mean and a 95 % normal
    interval from the discordant mazes (the within-seed measurement noise only; the seed-to-seed noise of
    training is not in it). Not ``agentrl.eval.compare``: a study row keeps only the panel hash, the counts and
    the outcomes of its evaluation (``evaluate_row``), not a whole ``EvalResult``.

    Args:
        a, b: ``evaluate_row`` dicts with ``outcomes`` [[task_id, 0.0 | 1.0], ...] over the same panel.
    Raises:
        ValueError: the panels differ (``panel_sha256``)."""
    if a["panel_sha256"] != b["panel_sha256"]:
        raise ValueError("the two evaluations ran on different panels: compare cells of one condition")
    x, y = dict(map(tuple, a["outcomes"])), dict(map(tuple, b["outcomes"]))
    d = np.array([x[t] - y[t] for t in x if t in y])
    n, mean = len(d), float(d.mean())
    se = math.sqrt(max(float((d ** 2).mean()) - mean ** 2, 0.0) / n)
    return {"n": n, "mean": 100 * mean, "ci95": (100 * (mean - 1.96 * se), 100 * (mean + 1.96 * se)),
            "a_only": int((d > 0).sum()), "b_only": int((d < 0).sum())}


def load(root: Path = ROOT) -> list[dict]:
    """The study's result files, the calibration cells' rows given their exact held-out success
    (``held_out_exact`` from ``results/CALIBRATION_EXACT`` where it exists)."""
    results = finished(root, "junction_llm_v2")
    path = Path(root) / "results" / v2.CALIBRATION_EXACT
    exact = json.loads(path.read_text())["cells"] if path.is_file() else {}
    for r in results:
        if r["key"] in exact:
            r["row"].setdefault("held_out_exact", exact[r["key"]])
    return results


def _points(d: dict | None, keys=("8", "16", "30")) -> str:
    return " / ".join(f"{100 * d[n]:.1f}" for n in keys if n in d) if d else "–"


def calibration_table(results: list[dict], untrained: dict | None = None) -> str:
    """Markdown: per calibration cell its exact held-out success and AUC at the checkpoints, first-junction
    accuracy, held-out greedy success and seconds; per condition oracle − GRPO on each (greedy paired by maze).

    Args:
        untrained: ``results/CALIBRATION_EXACT``'s "untrained" ({"k5-x2-h12": float}), shown per condition."""
    cal = sorted((r for r in results if r["key"].startswith("cal-")), key=lambda r: (condition(r), r["row"]["arm"]))
    lines = ["| condition (K, exits, hinted, groups × size) | arm | exact held-out success at 8 / 16 / 30 | success AUC "
             "8 / 16 / 30 | first junction | held-out greedy at 30 (n) | s |", "|---|---|---|---|---|---|---|"]
    for r in cal:
        row, (k, x, h, g, s) = r["row"], condition(r)
        base = (untrained or {}).get(f"k{k}-x{x}-h{h}")
        lines.append(f"| {k}, {x}, {h}, {g} × {s} | {row['arm']} | {_points(row.get('held_out_exact'))}"
                     f"{'' if base is None else f' (untrained {100 * base:.1f})'} | {_points(row['auc'])} | "
                     f"{100 * row['first_junction']:.1f} % | {100 * row['eval']['success_rate']:.1f} % "
                     f"({row['eval']['n']}) | {r['seconds']:.0f} |")
    lines += ["", "| condition | oracle − GRPO: exact held-out at 8 / 16 / 30 | success AUC 8 / 16 / 30 | held-out greedy "
              "at 30 (paired by maze, 95 %) | mazes only the oracle / only GRPO wins |", "|---|---|---|---|---|"]
    for cond in sorted({condition(r) for r in cal}):
        arms = {r["row"]["arm"]: r["row"] for r in cal if condition(r) == cond}
        if {"grpo", "oracle"} <= arms.keys():
            o, b = arms["oracle"], arms["grpo"]
            p = paired_mazes(o["eval"], b["eval"])
            ex = (" / ".join(f"{100 * (o['held_out_exact'][n] - b['held_out_exact'][n]):+.1f}" for n in ("8", "16", "30"))
                  if o.get("held_out_exact") and b.get("held_out_exact") else "–")
            auc = " / ".join(f"{100 * (o['auc'][n] - b['auc'][n]):+.1f}" for n in ("8", "16", "30"))
            lines.append(f"| {cond} | {ex} | {auc} | {p['mean']:+.1f} [{p['ci95'][0]:+.1f}, {p['ci95'][1]:+.1f}] | "
                         f"{p['a_only']} / {p['b_only']} |")
    return "\n".join(lines)


def flat(results: list[dict]) -> list[dict]:
    """Study rows (not the calibration's) as {arm, k, seed, primary, auc, greedy (at the last checkpoint), seconds,
    resumed}: ``seconds`` are the runner's, its last launch's only; ``resumed`` whether the cell had more than one
    launch (then ``seconds`` undercount the cell)."""
    return [{"arm": r["row"]["arm"], "k": r["row"]["k"], "seed": r["seed"], "primary": v2.primary(r["row"]),
             "auc": r["row"]["auc"].get(str(v2.PRIMARY_AT)), "greedy": r["row"]["eval"]["success_rate"],
             "seconds": r["seconds"], "resumed": len(r.get("launches") or ()) > 1}
            for r in results if not r["key"].startswith("cal-")]


def study_table(results: list[dict]) -> str:
    """Markdown: per (K, arm) the primary endpoint per seed; arm − GRPO paired over seeds with the 95 % t
    interval (K = 5) and the 90 % one against the K = 1 band; the rule's reading."""
    rows = flat(results)
    if not rows:
        return "No study cell has finished."
    at = v2.PRIMARY_AT
    lines = [f"| K | arm | seeds | exact held-out success at {at} (primary), per seed | mean | success AUC {at} (mean) | "
             f"held-out greedy at {v2.ITERATIONS} (mean) | s / cell (cells in one launch) |", "|---|---|---|---|---|---|---|---|"]
    for k in (5, 1):
        for arm in v2.STUDY_ARMS:
            rs = sorted((r for r in rows if r["k"] == k and r["arm"] == arm), key=lambda r: r["seed"])
            if rs:
                per = " / ".join(f"{100 * r['primary']:.1f}" for r in rs)
                whole = [r["seconds"] for r in rs if not r["resumed"]]
                lines.append(f"| {k} | {arm} | {len(rs)} | {per} | {100 * np.mean([r['primary'] for r in rs]):.1f} % | "
                             f"{100 * np.mean([r['auc'] for r in rs]):.1f} % | {100 * np.mean([r['greedy'] for r in rs]):.1f} % | "
                             f"{f'{np.mean(whole):.0f}' if whole else '–'} ({len(whole)}) |")
    lines += ["", "| K | arm − GRPO (points, primary) | seeds | mean | 95 % t interval | 90 % t interval | share of the oracle's gap |",
              "|---|---|---|---|---|---|---|"]
    reading = []
    for k in (5, 1):
        gap = paired(rows, "oracle", k)
        for arm in [a for a in v2.STUDY_ARMS if a != "grpo"]:
            p = paired(rows, arm, k)
            if not p:
                continue
            share = f"{p['mean'] / gap['mean']:.2f}" if gap and arm != "oracle" and abs(gap["mean"]) > 1e-9 else "–"
            lines.append(f"| {k} | {arm} | {p['n']} | {p['mean']:+.1f} | [{p['ci95'][0]:+.1f}, {p['ci95'][1]:+.1f}] | "
                         f"[{p['ci90'][0]:+.1f}, {p['ci90'][1]:+.1f}] | {share} |")
            if k == 5 and p["ci95"][0] > 0:
                reading.append(f"{arm}'s 95 % interval excludes 0 at K = 5")
            if k == 1:
                inside = -v2.BAND <= p["ci90"][0] and p["ci90"][1] <= v2.BAND
                reading.append(f"K = 1 {arm}: {'equivalent' if inside else 'not shown equivalent'} (±{v2.BAND:g})")
    n = v2.seeds_planned([r["row"] for r in results if not r["key"].startswith("cal-")])
    return "\n".join(lines + ["", f"Seeds planned by the rule: {n}. " + ("; ".join(reading) or "no interval excludes 0 yet")
                              + "."])


def curve(ax, xs: list[int], ys: np.ndarray, color: str, label: str) -> None:
    """Plot on matplotlib axes ``ax`` the mean over seeds of ``ys`` (float[n_seeds, len(xs)], in the caller's unit)
    against ``xs``, in ``color`` with legend ``label (n = n_seeds)``, and a min–max band where n_seeds > 1."""
    ax.plot(xs, ys.mean(0), color=color, label=f"{label} (n = {len(ys)})", marker="o" if len(xs) < 6 else None)
    if len(ys) > 1:
        ax.fill_between(xs, ys.min(0), ys.max(0), color=color, alpha=0.2)


def plot(results: list[dict], out: Path, calibration: bool = False, untrained: dict | None = None) -> Path:
    """Learning curves per arm (seed bands: min–max): training success and first-junction accuracy per
    iteration, the exact held-out success at the evaluated checkpoints (with the untrained model's as a dashed line
    where ``untrained`` — ``results/CALIBRATION_EXACT``'s — has the condition); one row per condition. PNG at ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sel = [r for r in results if r["key"].startswith("cal-") == calibration]
    conds = sorted({condition(r) for r in sel}, reverse=True)
    fig, axes = plt.subplots(max(len(conds), 1), 3, figsize=(14, 3.4 * max(len(conds), 1)), squeeze=False)
    for i, cond in enumerate(conds):
        for arm in v2.STUDY_ARMS:
            rs = [r["row"] for r in sel if condition(r) == cond and r["row"]["arm"] == arm]
            if not rs:
                continue
            n = min(len(r["per_iter"]) for r in rs)
            xs = list(range(1, n + 1))
            for j, field in enumerate(("success", "first_junction_right")):
                curve(axes[i][j], xs, 100 * np.array([[p[field] for p in r["per_iter"][:n]] for r in rs]),
                       COLORS[arm], arm)
            held = [r.get("held_out_exact") or {} for r in rs]
            cks = sorted(set.intersection(*(set(map(int, h)) for h in held)))
            if cks:
                curve(axes[i][2], cks, 100 * np.array([[h[str(c)] for c in cks] for h in held]), COLORS[arm], arm)
        base = (untrained or {}).get(f"k{cond[0]}-x{cond[1]}-h{cond[2]}")
        if base is not None:
            axes[i][2].axhline(100 * base, color="black", linestyle="--", linewidth=1, label="untrained")
        for j, name in enumerate(("training success (%)", "first-junction accuracy (%)",
                                  f"exact held-out success (%, {v2.EXACT_PANEL} mazes)")):
            axes[i][j].set_title(f"K {cond[0]}, {cond[1]} exits, {cond[2]} hinted, {cond[3]}×{cond[4]}: {name}",
                                 fontsize=9)
            axes[i][j].set_xlabel("iteration")
            axes[i][j].legend(fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plot", action="store_true", help="also write results/junction_llm_v2_calibration.png and "
                                                        "results/junction_llm_v2.png")
    ap.add_argument("--root", type=Path, default=ROOT)
    args = ap.parse_args()
    results = load(args.root)
    path = args.root / "results" / v2.CALIBRATION_EXACT
    base = json.loads(path.read_text())["untrained"] if path.is_file() else None
    print(calibration_table(results, base), "", study_table(results), sep="\n")
    if args.plot:
        print(plot(results, args.root / "results" / "junction_llm_v2_calibration.png", calibration=True, untrained=base))
        if any(not r["key"].startswith("cal-") for r in results):
            print(plot(results, args.root / "results" / "junction_llm_v2.png", untrained=base))


if __name__ == "__main__":
    main()

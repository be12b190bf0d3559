"""Issue 51's tabular map: where, on what the LLM study can afford, does step credit separate from GRPO?

Each cell is one condition of the junction maze (``agentrl/JunctionMaze-v0``): K junctions, exits per
junction, hinted cues per junction's table (of 24), groups × group size per iteration. In it,
``SEEDS`` seeds × 3 arms — GRPO, G2PO (``success_reward`` 1) and the **oracle** (trained on the exact
A^π, the ceiling of what credit can buy) — train a ``role_policy.RolePolicy`` (per-text logits plus
shared role skills, its prior calibrated on the untrained SmolLM2: ``results/junction_prior.json``)
for ``ITERATIONS`` iterations with one Adam step each, arms paired by seed (same mazes and sampling
seeds per iteration, ``credit_fidelity.mazes``). The step size ``LR`` is calibrated on the LLM
(``--calibrate-lr``): at issue 38's pilot condition (K = 5, 2 exits, 20 hinted, 4 × 8) the tabular
GRPO's gain in training success over 8 iterations (its mean over the iterations minus iteration 1's) is
matched to SmolLM2's (LoRA, lr 1e-3, one PPO step per iteration; ``results/junction_llm.json``), so an
iteration of the map moves the policy about as far as an iteration of the LLM (the prototype's lr 0.7
moved it ~4× too far). The gain, not the level: the calibrated prior starts the tabular policy ~5
points above SmolLM2 there. Read at ``CHECKPOINTS`` iterations n:

- ``auc``: training success averaged over iterations 1..n (the success AUC);
- ``greedy``: held-out greedy success on ``EVAL_MAZES`` eval-split mazes (the argmax path);
- ``v``: held-out exact success V^π(start) on the same mazes (π sampled, no sampling noise);

and at iteration 0 the policy's exact success on its first training mazes (``v0``: the untrained
success the calibrated prior implies; SmolLM2's own is in ``results/junction_prior.json``).
Reported per cell: each arm's mean, and arm − GRPO paired over seeds (mean, SD, 95 % normal
interval), in points. ``--summary`` prints the map; ``--plot`` writes ``results/junction_map.png``
(heatmaps of oracle − GRPO and G2PO − GRPO per condition × n).

A cell is a runner cell: its seeds are appended to ``seeds.jsonl`` in its run folder as they end,
so an interrupted cell resumes at the next seed.

Usage::

    .venv/bin/python -m studies.runner --study junction_map --left
    .venv/bin/python -m studies.junction_map --summary      # or --plot
    .venv/bin/python -m studies.junction_map --calibrate-lr 0.02 0.03 0.05 0.07 0.1 0.2 0.35 0.7   # the step size

The first three K = 5, 2-exit cells ran at the prototype's lr 0.7 before the calibration (keys ``-lr0.7``, outside the
grid; ``--status`` lists them).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from studies.runner import ROOT, Cell, Study, finished

ARMS = ("grpo", "g2po", "oracle")
SEEDS, ITERATIONS, EVAL_MAZES = 200, 50, 32
#: the map's Adam step size: the LLM-calibrated one (``calibrate_lr``, ``results/junction_map_lr.json``)
LR = 0.07
PILOT = (5, 2, 20, 4, 8)  #: issue 38's LLM pilot condition, where ``calibrate_lr`` matches the learning speed
CHECKPOINTS = (8, 16, 30, 50)
ENDPOINTS = ("auc", "greedy", "v")
#: (K, exits, hinted cues of 24, groups, group size), in the order the runner plays them: K = 5 on
#: the pilot's 4 × 8 first, then the K = 1 control, then K = 5 with twice the episodes.
CONDITIONS = ([(5, x, h, 4, 8) for x in (2, 3) for h in (0, 12, 20)]
              + [(1, x, h, 4, 8) for x in (2, 3) for h in (0, 12, 20)]
              + [(5, x, h, 8, 8) for x in (2, 3) for h in (0, 12, 20)])


def cell_key(k: int, exits: int, hinted: int, groups: int, size: int, lr: float = LR) -> str:
    """e.g. ``k5-x2-h12-4x8-lr0.05``."""
    return f"k{k}-x{exits}-h{hinted}-{groups}x{size}-lr{lr:g}"


def grid(root: Path = ROOT) -> list[Cell]:
    """One cell per condition (``CONDITIONS`` order)."""
    return [Cell("junction_map", cell_key(*c), {"k": c[0], "exits": c[1], "hinted": c[2], "groups": c[3],
                                                "size": c[4], "seeds": SEEDS, "iterations": ITERATIONS,
                                                "arms": list(ARMS), "eval_mazes": EVAL_MAZES, "lr": LR}) for c in CONDITIONS]


def eval_graphs(k: int, exits: int, hinted: int, n: int) -> list:
    """``n`` eval-split task graphs (env seeds 0..n-1): the held-out panel of every seed."""
    from studies.junction_untrained import maze_graphs

    return maze_graphs(k, hinted, n, split="eval", n_exits=exits)


def held_out(policy, graphs: list) -> tuple[float, float]:
    """(greedy success share, mean exact V^π(start)) of ``policy`` on ``graphs``."""
    from agentrl.credit.exact import exact_values

    greedy, v = [], []
    for g in graphs:
        greedy.append(policy.greedy_success(g))
        v.append(exact_values(g, policy.state_policy(g)).v(0, g.start))
    return float(np.mean(greedy)), float(np.mean(v))


def run_seed(cfg: dict, seed: int, prior: dict[str, float], evals: list, shared: bool = True) -> dict:
    """Every arm of one seed: {"seed", "v0", arm: {"train": float[ITERATIONS] success per iteration,
    "greedy" / "v": {n: held-out value after n iterations, n = 0 and ``CHECKPOINTS``}}}."""
    from agentrl.credit.exact import exact_values
    from studies import credit_fidelity as cf
    from studies.role_policy import RolePolicy
    from studies.tabular_maze import policy_gradient, success_rate

    k, kw = cfg["k"], {"n_exits": cfg["exits"], "n_hinted": cfg["hinted"]}
    out: dict = {"seed": seed}
    for arm in cfg["arms"]:
        policy = RolePolicy(lr=cfg["lr"], prior=prior, shared=shared)
        train, greedy, v = [], {}, {}
        greedy[0], v[0] = held_out(policy, evals)
        for it in range(cfg["iterations"]):
            graphs = cf.mazes(k, seed, it, cfg["groups"], kw)
            if it == 0 and "v0" not in out:
                for g in graphs:
                    policy.prime(g)
                out["v0"] = float(np.mean([exact_values(g, policy.state_policy(g)).v(0, g.start) for g in graphs]))
            b = cf.play(graphs, policy, cfg["size"], np.random.default_rng([seed, k, it]))
            train.append(success_rate(b))
            policy.step(policy_gradient(b, policy, cf.advantages(arm, b, policy)))
            if it + 1 in CHECKPOINTS:
                greedy[it + 1], v[it + 1] = held_out(policy, evals)
        out[arm] = {"train": train, "greedy": greedy, "v": v}
    return out


def checkpoints(cfg: dict) -> list[int]:
    """The ``CHECKPOINTS`` a cell of ``cfg["iterations"]`` iterations reaches."""
    return [n for n in CHECKPOINTS if n <= cfg["iterations"]]


def endpoint(rec: dict, arm: str, name: str, n: int) -> float:
    """One seed's value of endpoint ``name`` (``ENDPOINTS``) for ``arm`` after ``n`` iterations."""
    r = rec[arm]
    if name == "auc":
        return float(np.mean(r["train"][:n]))
    return float(r[name][str(n)] if str(n) in r[name] else r[name][n])


def summarize(cfg: dict, seeds: list[dict]) -> dict:
    """The cell's row: per arm the mean training curve and each endpoint's mean per n; arm − GRPO
    paired over seeds per endpoint and n (points: mean, sd, ci95); ``v0`` mean; seeds."""
    from studies.fidelity import mean_ci

    ns = checkpoints(cfg)
    row: dict = {"seeds": len(seeds), "v0": float(np.mean([s["v0"] for s in seeds])), "checkpoints": ns,
                 "arms": {}, "diff": {}}
    for arm in cfg["arms"]:
        curve = np.mean([s[arm]["train"] for s in seeds], axis=0)
        ends = {e: {str(n): float(np.mean([endpoint(s, arm, e, n) for s in seeds])) for n in ns}
                for e in ENDPOINTS}
        row["arms"][arm] = {"train": [round(float(x), 4) for x in curve], **ends,
                            "greedy0": float(np.mean([endpoint(s, arm, "greedy", 0) for s in seeds])),
                            "v_heldout0": float(np.mean([endpoint(s, arm, "v", 0) for s in seeds]))}
        if arm == "grpo":
            continue
        row["diff"][arm] = {}
        for e in ENDPOINTS:
            row["diff"][arm][e] = {}
            for n in ns:
                d = 100 * np.array([endpoint(s, arm, e, n) - endpoint(s, "grpo", e, n) for s in seeds])
                m, lo, hi = mean_ci(d)
                row["diff"][arm][e][str(n)] = {"mean": m, "sd": float(d.std(ddof=1)) if d.size > 1 else float("nan"),
                                               "ci95": [lo, hi]}
    return row


def run_cell(cell: Cell, run_dir: Path, prior_path: Path | None = None) -> dict:
    """The runner's ``run``: every seed of ``cell`` not yet in ``run_dir/seeds.jsonl``, then the row."""
    from studies.junction_prior import OUT, load_prior

    cfg = cell.config
    prior = load_prior(prior_path or OUT)[cfg["exits"]]
    evals = eval_graphs(cfg["k"], cfg["exits"], cfg["hinted"], cfg["eval_mazes"])
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "seeds.jsonl"
    done = [json.loads(x) for x in log.read_text().splitlines() if x.strip()] if log.is_file() else []
    have = {d["seed"] for d in done}
    t0 = time.process_time()
    with log.open("a") as f:
        for seed in range(cfg["seeds"]):
            if seed in have:
                continue
            rec = run_seed(cfg, seed, prior, evals)
            f.write(json.dumps(rec) + "\n")
            f.flush()
            done.append(rec)
    row = summarize(cfg, sorted(done, key=lambda d: d["seed"]))
    row["prior"] = prior
    row["cpu_s_this_launch"] = time.process_time() - t0
    return row


STUDY = Study("junction_map", grid, run_cell)


def _gain(curve: list[float]) -> float:
    """Mean success over the iterations minus the first iteration's."""
    return float(np.mean(curve) - curve[0])


def calibrate_lr(lrs: list[float], seeds: int = 100, prior_path: Path | None = None) -> dict:
    """Per step size: the tabular GRPO's and oracle's mean training success per iteration over
    ``seeds`` seeds at ``PILOT``, 8 iterations, against the LLM pilot's (``results/junction_llm.json``:
    K = 5 GRPO and oracle, 3 seeds, bf16); ``chosen`` the lr whose GRPO gain (success averaged over
    the 8 iterations minus iteration 1's) is nearest the LLM's."""
    from studies.junction_llm import OUT as PILOT_OUT
    from studies.junction_prior import OUT, load_prior

    k, exits, hinted, groups, size = PILOT
    prior = load_prior(prior_path or OUT)[exits]
    evals = eval_graphs(k, exits, hinted, 1)
    runs = [r for r in json.loads(PILOT_OUT.read_text())["runs"] if r["k"] == k and r["arm"] in ("grpo", "oracle")]
    llm = {arm: np.mean([[p["success"] for p in r["per_iter"]] for r in runs if r["arm"] == arm], axis=0).tolist()
           for arm in ("grpo", "oracle")}
    rows = []
    for lr in lrs:
        cfg = {"k": k, "exits": exits, "hinted": hinted, "groups": groups, "size": size, "iterations": 8,
               "arms": ["grpo", "oracle"], "lr": lr}
        recs = [run_seed(cfg, s, prior, evals) for s in range(seeds)]
        rows.append({"lr": lr, **{arm: np.mean([r[arm]["train"] for r in recs], axis=0).tolist()
                                  for arm in ("grpo", "oracle")}})
    chosen = min(rows, key=lambda r: abs(_gain(r["grpo"]) - _gain(llm["grpo"])))["lr"]
    return {"condition": dict(zip(("k", "exits", "hinted", "groups", "size"), PILOT)), "seeds": seeds,
            "llm_pilot": llm, "llm_seeds": len(runs) // 2, "rows": rows, "chosen": chosen}


def _fmt(d: dict) -> str:
    return f"{d['mean']:+.1f} [{d['ci95'][0]:+.1f}, {d['ci95'][1]:+.1f}]"


def summary(results: list[dict], end: str = "greedy") -> str:
    """Markdown: one line per finished cell and n: v0, the untrained SmolLM2's success, GRPO's value,
    oracle − GRPO and G2PO − GRPO on ``end``."""
    llm = _llm_success()
    lines = [f"Endpoint: {end}. Points; arm − GRPO paired over seeds, 95 % intervals. v0: the calibrated tabular "
             "policy's exact success at iteration 0; LLM: the untrained SmolLM2's (results/junction_prior.json).", "",
             "| cell | seeds | v0 | LLM | n | GRPO | oracle − GRPO | G2PO − GRPO |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        row, v = r["row"], llm.get(_condition(r))
        for n in row["checkpoints"]:
            g = row["arms"]["grpo"][end][str(n)]
            lines.append(f"| {r['key']} | {row['seeds']} | {100 * row['v0']:.1f} % | "
                         f"{'–' if v is None else f'{100 * v:.1f} %'} | {n} | {100 * g:.1f} % | "
                         f"{_fmt(row['diff']['oracle'][end][str(n)])} | {_fmt(row['diff']['g2po'][end][str(n)])} |")
    return "\n".join(lines)


def _condition(result: dict) -> tuple[int, int, int]:
    c = result["config"]
    return c["k"], c["exits"], c["hinted"]


def _llm_success() -> dict[tuple[int, int, int], float]:
    """(K, exits, hinted) → the untrained SmolLM2's exact success (``results/junction_prior.json``; {} without it)."""
    from studies.junction_prior import OUT

    if not OUT.is_file():
        return {}
    return {(r["k"], r["exits"], r["hinted"]): r["success"] for r in json.loads(OUT.read_text())["rows"]}


def plot(results: list[dict], out: Path) -> Path:
    """Heatmaps (rows: cells, labelled with the untrained SmolLM2's success where
    ``results/junction_prior.json`` has it; columns: n) of oracle − GRPO and G2PO − GRPO on ``auc``
    and ``greedy``, numbers written in each square; PNG at ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    llm = _llm_success()
    keys = [r["key"] + (f"  (LLM {100 * llm[_condition(r)]:.1f} %)" if _condition(r) in llm else "") for r in results]
    fig, axes = plt.subplots(2, 2, figsize=(11, 1.2 + 0.42 * len(keys) * 2), squeeze=False)
    for i, end in enumerate(("auc", "greedy")):
        for j, arm in enumerate(("oracle", "g2po")):
            m = np.array([[r["row"]["diff"][arm][end].get(str(n), {"mean": np.nan})["mean"] for n in CHECKPOINTS]
                          for r in results])
            ax = axes[i][j]
            lim = max([5.0, *np.abs(m[np.isfinite(m)]).tolist()])
            ax.imshow(m, cmap="RdBu", vmin=-lim, vmax=lim, aspect="auto")
            ax.set_xticks(range(len(CHECKPOINTS)), [str(n) for n in CHECKPOINTS])
            ax.set_yticks(range(len(keys)), keys, fontsize=8)
            ax.set_xlabel("iterations n")
            ax.set_title(f"{arm} − GRPO, {'success AUC' if end == 'auc' else 'held-out greedy success'} (points)",
                         fontsize=9)
            for (y, x), val in np.ndenumerate(m):
                if np.isfinite(val):
                    ax.text(x, y, f"{val:+.1f}", ha="center", va="center", fontsize=7,
                            color="white" if abs(val) > 0.6 * lim else "black")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--summary", action="store_true", help="print the map of the finished cells")
    ap.add_argument("--endpoint", choices=ENDPOINTS, default="greedy")
    ap.add_argument("--lr", type=float, default=LR, help=f"the cells of this step size (default {LR:g})")
    ap.add_argument("--plot", type=Path, nargs="?", const=ROOT / "results" / "junction_map.png",
                    help="write the heatmaps (default results/junction_map.png)")
    ap.add_argument("--root", type=Path, default=ROOT)
    ap.add_argument("--calibrate-lr", type=float, nargs="+", metavar="LR",
                    help="match the tabular learning speed to the LLM pilot's over these step sizes; writes "
                         "results/junction_map_lr.json")
    args = ap.parse_args()
    if args.calibrate_lr:
        out = args.root / "results" / "junction_map_lr.json"
        data = calibrate_lr(args.calibrate_lr)
        out.write_text(json.dumps(data, indent=1))
        for r in data["rows"]:
            print(f"lr {r['lr']:g}: GRPO success over 8 iterations {100 * np.mean(r['grpo']):.1f} % (gain "
                  f"{100 * _gain(r['grpo']):+.1f}), oracle {100 * np.mean(r['oracle']):.1f} %")
        llm = data["llm_pilot"]
        print(f"LLM pilot: GRPO {100 * np.mean(llm['grpo']):.1f} % (gain {100 * _gain(llm['grpo']):+.1f}), oracle "
              f"{100 * np.mean(llm['oracle']):.1f} % -> lr {data['chosen']:g}")
        return
    order = {cell_key(*c, lr=args.lr): i for i, c in enumerate(CONDITIONS)}
    results = sorted((r for r in finished(args.root, "junction_map") if r["config"]["lr"] == args.lr),
                     key=lambda r: order.get(r["key"], len(order)))
    if args.plot:
        print(plot(results, args.plot))
    if args.summary or not args.plot:
        print(summary(results, args.endpoint))


if __name__ == "__main__":
    main()

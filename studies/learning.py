"""Learning benchmark: held-out success before vs after RL, every registered estimator at the same budget.

The LEARNING.md setup: SmolLM2-135M-Instruct in bf16, decoding constrained to the
admissible commands, LoRA on the top 6 layers, TextWorld "cu1" (or "cc3") games, groups of
4, one on-policy PPO step per iteration; the prompt is the task, the last 3 actions and the
current observation (``examples/gigpo_textworld.yaml``, which this script loads). For each
env, seed and estimator the script evaluates the packaged model on the held-out panel
(greedy and sampled), trains, evaluates the final checkpoint on the same panel, and writes
everything (success rates, 95 % Wilson intervals, panel hash, wall times, the exact config)
to the cell's result file ``studies/results/learning/<key>.json`` (``studies.runner``: the cell
trains in ``studies/runs/learning/<key>/`` and resumes there when run again after an interruption;
``GRID`` is the study's grid, ``python -m studies.runner --status --study learning`` its state).

``--env jm5`` / ``jm1``: the junction maze (issues 38/39) at K = 5 / 1 instead, under
``examples/grpo_junction.yaml`` (Markov prompt, 24 turns; the estimator's part as below; BEACON and
3SPO take their junction example configs' kwargs). ``--tagged``: under the HiPER cells' prompt and tagged
decoding, the control that separates HiPER's credit from its format.

Any registered estimator can be a cell (``--estimators``): it trains under that same base
config and budget with its own hyperparameters from its example config, plus what it cannot
run without on the TextWorld chain setup (``learning_cells``: Dr.GRPO's aggregation,
BiPACE's stored hidden states, Tree-GRPO's tree sampler — 2 trees × 2 kept leaves per task —
RTPO's reverse-turn sampler; turn-PPO's critic is added by the trainer itself). Each row also
records the run's credit diagnostics (``learning_diag``: the fraction of training turns with
advantage exactly 0 from ``metrics.jsonl``; from the run's store, per iteration, the share of
turns in env-state anchor groups of size >= 2 and the mean group size, and the same for each
comparison group of the estimator's breakdown terms), the turns trained, and the condition
(``OMP_NUM_THREADS``, torch threads, load average at the start and the end of the run).

The "before" evaluation does not depend on the estimator: it is computed once per (env,
panel, seed, hash of the env and policy config — ``policy.return_hidden`` left out) and shared
by the estimators of that seed (the greedy one once per (env, panel, hash): greedy decoding
ignores the seed). The cells' rows and those of ``results/learning.json`` (the merged JSON of the
runs before the runner, kept as written) are merged by (env, estimator, seed, iterations, panel, group size,
dtype, panel hash, turn-PPO's critic settings, action format), so a grid can be run in pieces;
``--summary`` prints the Markdown table of both (per-run rows with their diagnostics,
then means over seeds). ``--group-size G`` trains groups
of G episodes per task on 24 // G tasks per iteration (the same 24 episodes; rows keyed by group
size too); ``--paired BASELINE`` prints each estimator's paired difference from BASELINE over the
seeds and panel tasks both evaluated (``learning_paired``: per-task outcomes, two-level bootstrap
interval, anchor-group statistics). ``--smoke`` checks that cells
start (1 iteration, 1 task, 3 turns, under the given ``--root``).

Usage::

    .venv/bin/python -m studies.learning --env cu1 cc3 --seeds 0 1 2 \
        --estimators grpo gigpo hgpo graphgpo --iterations 8 --panel 24
    .venv/bin/python -m studies.learning --summary
    .venv/bin/python -m studies.learning --env cc3 --group-size 8 --seeds 0 1 2 \
        --estimators grpo gigpo      # the paired comparison's cells
    .venv/bin/python -m studies.learning --paired grpo
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import time
from dataclasses import asdict
from pathlib import Path

from studies.learning_paired import critic_of, dtype_of, format_of, group_size_of, paired_summary, panel_of
from studies.learning_tables import diag_cells, label, pct, summary, unfinished_summary
from studies.runner import ROOT, Cell, Study, finished, run_cell as run_on_runner

#: --env name -> (env id, max turns, base config in examples/, extra overrides). The junction-maze cells
#: (issues 38/39) take grpo_junction.yaml: a Markov prompt (window_k 0), K junctions, the env's eval split.
ENVS = {"cu1": ("agentrl/TextWorld-CU1-v0", 8, "gigpo_textworld.yaml", []),
        "cc3": ("agentrl/TextWorld-CC3-v0", 10, "gigpo_textworld.yaml", []),
        "jm1": ("agentrl/JunctionMaze-v0", 24, "grpo_junction.yaml", ["env.kwargs={\"k\":1}"]),
        "jm5": ("agentrl/JunctionMaze-v0", 24, "grpo_junction.yaml", ["env.kwargs={\"k\":5}"])}
OUT = Path(__file__).parent / "results" / "learning.json"
KEY = ("env", "estimator", "seed", "iterations", "panel", "group_size", "dtype", "panel_sha", "critic", "format")
EPISODES = 24  #: episodes per iteration of every cell: groups_per_iteration = EPISODES // group size
DTYPES = {"bfloat16": "bf16", "float32": "fp32"}  #: policy.dtype -> its part of a cell key
_ALL = ("grpo", "grpo_mean", "dr_grpo", "gigpo", "hgpo", "g2po", "graphgpo", "bipace", "tree_grpo", "rtpo", "turn_ppo")
#: The cells studies/results/learning.md reports, in bf16: (env, group size, tagged, estimators, seeds).
GRID = [("cu1", 4, False, _ALL, (0, 1)), ("cu1", 4, False, ("grpo", "gigpo"), (2,)),
        ("cc3", 4, False, ("grpo", "gigpo"), (0, 1, 2)), ("cc3", 8, False, ("grpo", "gigpo", "hgpo", "graphgpo"), (0, 1, 2)),
        ("jm5", 8, False, ("grpo", "gigpo", "beacon", "threespo", "hiper"), (0, 1)), ("jm5", 8, True, ("grpo",), (0, 1))]


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


def auto_dtype() -> str:
    """``bfloat16`` (the example's) where the CPU has AVX-512-BF16 / AMX or a GPU is present,
    else ``float32`` (bf16 is ~13x slower than fp32 there; as ``scripts/main.sh`` decides)."""
    import torch

    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        flags = ""
    return "bfloat16" if torch.cuda.is_available() or "avx512_bf16" in flags or "amx_bf16" in flags else "float32"


def config_for(env: str, estimator: str, seed: int, iterations: int, panel: int, out_dir: Path, smoke: bool = False,
               dtype: str = "bfloat16", group_size: int = 4, tagged: bool = False, extra: tuple[str, ...] = ()):
    """The training config of one grid cell: the base config + the benchmark's budget + the
    estimator's own part (``learning_cells.estimator_overrides``) in ``policy.dtype`` ``dtype``;
    ``smoke``: a tiny budget. ``group_size`` episodes per task, ``EPISODES // group_size``
    tasks per iteration (the same episodes per iteration for every group size). ``tagged``: under
    HiPER's tagged decoding (``learning_cells.TAGGED_JUNCTION``; run name suffix ``-tagged``);
    ``extra``: overrides applied last (the runner's run name and checkpoint schedule).

    Raises:
        ValueError: ``group_size`` does not divide ``EPISODES``; ``tagged`` outside the junction maze.
    """
    from studies.learning_cells import SMOKE, estimator_overrides

    from agentrl.train.checks import load_checked_config

    env_id, max_turns, base, env_overrides = ENVS[env]
    if group_size < 2 or EPISODES % group_size:
        raise ValueError(f"--group-size {group_size}: it must be >= 2 and divide the {EPISODES} episodes of an iteration "
                         "(2, 3, 4, 6, 8, 12, 24)")
    tag = ("" if group_size == 4 else f"-g{group_size}") + ("-tagged" if tagged else "")
    overrides = [f"run.name=learning-{env}-{estimator}-s{seed}{tag}", f"run.out_dir={out_dir}", f"run.seed={seed}",
                 f"run.iterations={iterations}", "run.eval_every=0", f"run.save_every={iterations}",
                 "run.eval_before=false", f"run.eval_seed={seed}",  # this script evaluates before/after itself
                 f"env.id={env_id}", f"env.max_turns={max_turns}", f"env.eval_panel_size={panel}",
                 f"policy.dtype={dtype}", f"rollout.groups_per_iteration={EPISODES // group_size}", f"rollout.group_size={group_size}",
                 *env_overrides, *estimator_overrides(estimator, junction=env.startswith("jm"), tagged=tagged),
                 "log.console=false"]
    if smoke:
        overrides += SMOKE + ["run.save_every=1"] + (["env.max_turns=15"] if env == "jm5" else [])  # maze: >= 3k
    return load_checked_config(Path(__file__).parents[1] / "examples" / base, [*overrides, *extra])


def _condition() -> dict:
    """Threads and load now: OMP_NUM_THREADS, torch's intra-op threads, the 1/5/15-min load."""
    import torch

    return {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "torch_threads": torch.get_num_threads(),
            "loadavg": list(os.getloadavg()), "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def run_cell(cell: Cell, run_dir: Path) -> dict:
    """Before-eval (cached per env/panel/seed in ``run_dir``'s parent), training (resumed from
    ``run_dir``'s last checkpoint; one per iteration), after-eval and diagnostics
    (``learning_diag.run_diagnostics``) of one cell (``make_cell``)."""
    from studies.learning_diag import run_diagnostics

    from agentrl.config import to_dict
    from agentrl.train import train

    c, out_dir = cell.config, run_dir.parent
    env, estimator, seed, panel = c["env"], c["estimator"], cell.seed, c["panel"]
    start = _condition()
    cfg = config_for(env, estimator, seed, c["iterations"], panel, out_dir, c.get("smoke", False), c["dtype"],
                     c["group_size"], c["tagged"], (f"run.name={run_dir.name}", "run.save_every=1"))
    d = to_dict(cfg)  # the cache key: everything the before-eval depends on (env and policy sections;
    pol = {k: v for k, v in d["policy"].items() if k != "return_hidden"}  # storing hidden states changes no action)
    tag = hashlib.sha256(json.dumps({"env": d["env"], "policy": pol}, sort_keys=True).encode()).hexdigest()[:10]
    cache = out_dir / "before"
    greedy_b, s_gb = _cached(cache / f"{env}-p{panel}-{tag}-greedy.json", lambda: _eval(cfg, True))
    sampled_b, s_sb = _cached(cache / f"{env}-p{panel}-{tag}-s{seed}-sampled.json", lambda: _eval(cfg, False))
    t1 = time.perf_counter()
    result = train(cfg, resume=True)
    t2 = time.perf_counter()
    ckpt = result.run_dir / "checkpoints" / (result.run_dir / "checkpoints" / "latest").read_text().strip()
    after = {"greedy": _eval(cfg, True, ckpt), "sampled": _eval(cfg, False, ckpt)}
    t3 = time.perf_counter()
    diag = run_diagnostics(result.run_dir, cfg.run.name, estimator, dict(cfg.algorithm.kwargs))
    turns = diag["logged"]["per_iter"]["rollout/turns"]
    return {"env": env, "estimator": estimator, "seed": seed, "iterations": c["iterations"], "panel": panel,
            "group_size": c["group_size"], "optimizer_steps": result.state.optimizer_steps, "before": {"greedy": greedy_b, "sampled": sampled_b},
            "after": after, "turns_trained": int(sum(t for t in turns if t is not None)),
            "diagnostics": diag, "condition": {"start": start, "end": _condition()}, "run_dir": str(result.run_dir),
            "seconds": {"eval_before": s_gb + s_sb, "train": t2 - t1, "eval_after": t3 - t2,
                        "total_with_before": (t3 - t1) + s_gb + s_sb},
            "config": to_dict(cfg)}


def make_cell(env: str, estimator: str, seed: int, dtype: str = "bfloat16", group_size: int = 4, tagged: bool = False,
              iterations: int = 8, panel: int = 24, smoke: bool = False) -> Cell:
    """The runner's cell of these ``config_for`` arguments; key e.g. ``cu1-grpo-bf16-s0``, plus
    ``-g8`` / ``-tagged`` / ``-i4`` / ``-p16`` / ``-smoke`` where they are not the defaults."""
    key = (f"{env}-{estimator}-{DTYPES[dtype]}-s{seed}" + (f"-g{group_size}" if group_size != 4 else "")
           + ("-tagged" if tagged else "") + (f"-i{iterations}" if iterations != 8 else "")
           + (f"-p{panel}" if panel != 24 else "") + ("-smoke" if smoke else ""))
    return Cell("learning", key, {"env": env, "estimator": estimator, "dtype": dtype, "group_size": group_size,
                                  "tagged": tagged, "iterations": iterations, "panel": panel, "smoke": smoke}, seed)


def grid(root: Path = ROOT) -> list[Cell]:
    """The grid studies/results/learning.md reports (``GRID``: bf16, 8 iterations, 24-task panels)."""
    return [make_cell(env, est, seed, group_size=g, tagged=tagged)
            for env, g, tagged, ests, seeds in GRID for est in ests for seed in seeds]


def historical(cell: Cell) -> str | None:
    """'learning.json' when the merged JSON of the runs before the runner holds the cell's row
    (same env, estimator, seed, budget, group size, dtype and action format; any panel hash and
    critic setting)."""
    c = cell.config
    want = (c["env"], c["estimator"], cell.seed, c["iterations"], c["panel"], c["group_size"], c["dtype"],
            "hiper tags" if c["tagged"] or c["estimator"] == "hiper" else "")
    got = {(r["env"], r["estimator"], r["seed"], r["iterations"], r["panel"], group_size_of(r), dtype_of(r), format_of(r))
           for r in _historical_rows()}
    return "learning.json (before the runner)" if want in got else None


@functools.cache
def _historical_rows() -> list[dict]:
    return json.loads(OUT.read_text()).get("runs", []) if OUT.is_file() else []


def all_rows(out: Path, root: Path = ROOT) -> dict:
    """``out``'s data (the merged JSON) with the rows of the runner's finished cells under ``root``
    merged into its ``runs`` (a cell's row replaces a merged row of the same ``row_key``)."""
    data = json.loads(out.read_text()) if out.is_file() else {}
    for record in finished(root, "learning"):
        if not record["config"].get("smoke"):
            data["runs"] = merge(data.get("runs", []), record["row"])
    return data


def unfinished_row(run_dir: Path, env: str, estimator: str, seed: int, iterations: int, panel: int, reason: str,
                   group_size: int = 4) -> dict:
    """A record of a cell stopped before its after-evaluation: the iterations it logged, its
    in-training (sampled) success per iteration and its diagnostics, read from ``run_dir``."""
    import yaml
    from studies.learning_diag import run_diagnostics

    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    from studies.learning_diag import summarise

    diag = run_diagnostics(run_dir, cfg["run"]["name"], estimator, dict(cfg["algorithm"].get("kwargs") or {}))
    per = diag["logged"]["per_iter"]
    st = diag["store"]  # only the iterations that finished (logged): a stopped update leaves its advantages stored
    st["per_iter"] = [d for d in st["per_iter"] if d["iteration"] <= len(per["rollout/turns"])]
    st["mean"] = summarise([{k: v for k, v in d.items() if k != "iteration"} for d in st["per_iter"]])
    return {"env": env, "estimator": estimator, "seed": seed, "iterations": iterations, "panel": panel,
            "group_size": group_size, "iterations_done": len(per["rollout/turns"]), "reason": reason,
            "train_success_per_iter": per["rollout/success_rate"], "diagnostics": diag, "run_dir": str(run_dir),
            "config": cfg}


def merge(rows: list[dict], row: dict) -> list[dict]:
    """``rows`` with ``row`` replacing any row of the same ``row_key``."""
    return [r for r in rows if row_key(r) != row_key(row)] + [row]


def row_key(row: dict) -> tuple:
    """A row's ``KEY`` values (group size 4 for rows written before ``--group-size``; the dtype is
    ``policy.dtype`` of the row's config, so a float32 re-run never replaces a bf16 row; the panel
    hash is the after-evaluation's, so a run on today's panel never replaces one on an older panel
    of the same size; turn-PPO's critic settings, ``critic_of``, and the action format, ``format_of``, likewise)."""
    derived = {"group_size": group_size_of, "dtype": dtype_of, "panel_sha": panel_of, "critic": critic_of, "format": format_of}
    return tuple(derived[k](row) if k in derived else row.get(k) for k in KEY)


def main(argv: list[str] | None = None) -> None:
    """The command line (module docstring)."""
    from agentrl.credit import list_estimators

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", nargs="+", choices=sorted(ENVS), default=["cu1"])
    ap.add_argument("--estimators", nargs="+", default=["grpo", "gigpo"], choices=sorted(list_estimators()),
                    metavar="NAME", help=f"registered estimators (default: grpo gigpo): {', '.join(sorted(list_estimators()))}")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--panel", type=int, default=24, help="held-out tasks (default: 24)")
    ap.add_argument("--root", type=Path, default=ROOT, help="the runner's folder: run folders in ROOT/runs/learning, "
                    "one result file per finished cell in ROOT/results/learning (default: studies/)")
    ap.add_argument("--out", default=str(OUT), help="the merged JSON of the runs before the runner (read with the "
                    "finished cells by --summary / --paired; written by --merge / --unfinished / --rediagnose)")
    ap.add_argument("--dtype", choices=["auto", "bfloat16", "float32"], default="auto",
                    help="policy.dtype (default auto: float32 on a CPU without AVX-512-BF16/AMX, else bfloat16)")
    ap.add_argument("--smoke", action="store_true", help="tiny budget (1 iteration, 1 task, 3 turns): checks that "
                    "each cell starts; use with a --root outside the tree")
    ap.add_argument("--group-size", type=int, default=4, help=f"episodes per task (default 4); {EPISODES} // it "
                    "tasks per iteration, so every group size plays the same episodes")
    ap.add_argument("--tagged", action="store_true", help="junction maze only: train under HiPER's tagged decoding "
                    "(learning_cells.TAGGED_JUNCTION), the control that separates HiPER's credit from its format")
    ap.add_argument("--summary", action="store_true", help="print the Markdown table of --out and exit")
    ap.add_argument("--merge", nargs="+", metavar="JSON", help="merge the rows of these --out files (cells run in "
                    "parallel processes, each with its own --out) into --out and exit")
    ap.add_argument("--paired", metavar="BASELINE", help="print every estimator's paired difference from BASELINE "
                    "(same env, group size, seeds and tasks; learning_paired) and exit")
    ap.add_argument("--unfinished", metavar="RUN_DIR", help="record the stopped cell in RUN_DIR (with --env, one "
                    "--estimators and --seeds, --iterations, --panel, --reason) under 'unfinished' in --out and exit")
    ap.add_argument("--reason", default="stopped before the after-evaluation")
    ap.add_argument("--rediagnose", action="store_true", help="recompute the diagnostics of every row of --out whose "
                    "run folder still exists (after a change to learning_diag) and exit")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.smoke and args.root.resolve() == ROOT.resolve():
        ap.error("--smoke writes its cells' results under --root: give one outside studies/")
    data = all_rows(out, args.root) if args.paired or args.summary else json.loads(out.read_text()) if out.is_file() else {}
    rows = data.get("runs", [])
    if args.merge:
        for f in args.merge:
            other = json.loads(Path(f).read_text())
            for key in ("runs", "unfinished"):
                for row in other.get(key, []):
                    data[key] = merge(data.get(key, []), row)
                    print(f"merged {key[:-1] if key == 'runs' else key} {row['env']} {label(row)} seed {row['seed']} from {f}")
        out.write_text(json.dumps(data, indent=1, default=float))
        return
    if args.paired:
        print(paired_summary(rows, args.paired))
        return
    if args.summary:
        print(summary(rows))
        if data.get("unfinished"):
            print("\nUnfinished cells (no after-evaluation):\n\n" + unfinished_summary(data["unfinished"]))
        for r in data.get("superseded", []):  # runs a fix made obsolete, kept with their cause
            print(f"\nSuperseded: {r['env']} {label(r)} seed {r['seed']}: greedy {pct(r['before']['greedy'])} -> "
                  f"{pct(r['after']['greedy'])}; {r.get('superseded_because', '')}")
        return
    if args.rediagnose:
        from studies.learning_diag import run_diagnostics

        for r in rows:
            if r.get("run_dir") and Path(r["run_dir"], "metrics.jsonl").is_file():
                r["diagnostics"] = run_diagnostics(Path(r["run_dir"]), r["config"]["run"]["name"], r["estimator"],
                                                   dict(r["config"]["algorithm"]["kwargs"]))
                print(f"rediagnosed {r['env']} {r['estimator']} seed {r['seed']}: {' | '.join(diag_cells(r))}")
        out.write_text(json.dumps(data, indent=1, default=float))
        return
    if args.unfinished:
        row = unfinished_row(Path(args.unfinished), args.env[0], args.estimators[0], args.seeds[0], args.iterations,
                             args.panel, args.reason, args.group_size)
        data["unfinished"] = merge(data.get("unfinished", []), row)
        out.write_text(json.dumps(data, indent=1, default=float))
        print(unfinished_summary(data["unfinished"]))
        return
    if args.tagged and not all(e.startswith("jm") for e in args.env):
        ap.error("--tagged: HiPER's tagged decoding is set up for the junction maze only (--env jm1 / jm5)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    dtype = auto_dtype() if args.dtype == "auto" else args.dtype
    print(f"policy.dtype={dtype}", flush=True)
    for env in args.env:
        for seed in args.seeds:
            for est in args.estimators:
                cell = make_cell(env, est, seed, dtype, args.group_size, args.tagged, args.iterations, args.panel, args.smoke)
                row = run_on_runner(STUDY, cell, args.root)["row"]
                b, a = row["before"], row["after"]
                print(f"{env} {est} seed {seed}: greedy {b['greedy']['success_rate']:.1%} -> "
                      f"{a['greedy']['success_rate']:.1%}, sampled {b['sampled']['success_rate']:.1%} -> "
                      f"{a['sampled']['success_rate']:.1%}, train {row['seconds']['train']:.0f} s, "
                      f"diagnostics: {' | '.join(diag_cells(row))}; {cell.key}", flush=True)


STUDY = Study("learning", grid, run_cell, historical)


if __name__ == "__main__":
    main()

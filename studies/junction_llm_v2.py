"""Issue 51's LLM study on the junction maze: step credit against GRPO with the budget and the endpoint
to show it. Its **calibration** (before the rule): one seed of GRPO and of the oracle on each of the two
candidate conditions the tabular map (``junction_map``, lr calibrated on the pilot) ranks best among those
where the untrained SmolLM2 succeeds often enough to learn from sampled groups. Its **study** (under the
rule, ``CONDITION`` … ``BAND``, committed before the first study cell): GRPO, G2PO, GraphGPO and the oracle
at the chosen condition, K = 5 then the K = 1 control, seeds 1 .. n, the primary endpoint the final
checkpoint's held-out greedy success (``primary``); ``junction_llm_v2_report`` reads both back.

A cell trains ``junction_llm.run_cell`` (``examples/grpo_junction.yaml``: SmolLM2-135M-Instruct, LoRA top 6
layers, Markov prompt, constrained decoding, one PPO step per iteration) at the candidate's K, exits, hinted
cues and groups × group size, **fp32** (bf16 is ~13× slower on AVX2 hosts and puts the oracle's π off by
0.12–0.23 nats), ``update.sampler_kl_every: 0`` (the fp32 in-process sampler is the trainer), for
``ITERATIONS`` iterations; then greedy success of the final checkpoint on ``PANEL`` eval-split mazes. Its
row: the per-iteration training success and first-junction accuracy, the success AUC at the map's
checkpoints, the held-out greedy success, seconds, and the prompt's fingerprint; a study cell's also the exact
held-out success at every ``HELD_OUT_AT`` checkpoint (``exact_held_out``; the primary endpoint at ``PRIMARY_AT``).

**The prompt is pinned** (``PROMPT_SHA256``): the sha256 of the token ids of every state prompt of one
fixed maze as the rollout renders them (``llm_maze.state_prompts``, the SmolLM2 chat template, the
env's text). A cell refuses to start when it differs — a change to the prompt (issue 48 changed turn 0's)
would make cells incomparable; re-pinning is a new study.

Usage::

    .venv/bin/python -m studies.runner --study junction_llm_v2 --left    # one per core: they share the cells
    .venv/bin/python -m studies.junction_llm_v2 --fingerprint     # the current prompt's sha256
    .venv/bin/python -m studies.junction_llm_v2 --untrained       # the untrained model on each candidate's panel
    .venv/bin/python -m studies.junction_llm_v2 --calibration-exact   # the calibration's exact held-out success
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import time
from pathlib import Path

import numpy as np

from studies.runner import ROOT, Cell, Study, finished

ITERATIONS, PANEL, SEED = 30, 256, 0
CHECKPOINTS = (8, 16, 30)
#: (K, exits, hinted cues, groups, group size): the map's two best candidates (benchmarks/RESULTS.md,
#: "Step credit on an LLM"): among the K = 5 conditions where the untrained SmolLM2 wins >= 5 % (a 4 x 8
#: iteration then sees >= 1.6 wins to learn from), the two with the largest oracle - GRPO on held-out greedy
#: success at 16 iterations of the lr-calibrated map: 2 exits with 12 hinted cues (+16.3 [+15.1, +17.5];
#: SmolLM2 10.7 %) and 3 exits with 20 hinted (+8.1 [+6.9, +9.3]; 5.1 %). The pilot's 2 exits / 20 hinted: +1.9.
CANDIDATES: tuple[tuple[int, int, int, int, int], ...] = ((5, 2, 12, 4, 8), (5, 3, 20, 4, 8))
ARMS = ("grpo", "oracle")
#: ---- the study: the rule (benchmarks/RESULTS.md, "The rule"), committed before the first study cell ----
#: (exits, hinted, groups, group size) of the study's maze, chosen by the calibration; None: calibration only
CONDITION: tuple[int, int, int, int] | None = (2, 12, 4, 8)
STUDY_ARMS = ("grpo", "g2po", "graphgpo", "oracle")
HELD_OUT_AT = (8, 16, 30)  #: checkpoints scored by the exact held-out success (``exact_held_out``)
PRIMARY_AT = 16  #: the primary endpoint: the exact held-out success of this checkpoint
FIRST_SEEDS, MAX_SEEDS = 3, 8  #: seeds before the SD is read; the cap
EXACT_PANEL = 32  #: eval-split mazes of the exact held-out success (``exact_held_out``)
GAP = 9.9  #: points of the primary endpoint the study is powered for: half the calibration's oracle − GRPO there
BAND = 5.0  #: K = 1: arm − GRPO's 90 % interval inside ±BAND points reads "equivalent"
#: sha256 of the rollout's state prompts of ``FINGERPRINT_MAZE`` under SmolLM2 (``prompt_fingerprint``)
PROMPT_SHA256 = "cc8c935cfcc9dea68a297ee4afa52ff06aedcc42e8a1258554e893a89a53f56e"
FINGERPRINT_MAZE = (5, 2, 12, 0)  #: (K, exits, hinted, train-split env seed)


def prompt_fingerprint(model: str = "smollm2-135m-instruct") -> str:
    """sha256 over the token ids of every state prompt of ``FINGERPRINT_MAZE`` (sorted by state)."""
    from transformers import AutoTokenizer

    from agentrl.llm.chat import ChatRenderer
    from agentrl.llm.models import resolve_model
    from studies.junction_untrained import maze_graphs
    from studies.llm_maze import markov_loop, state_prompts

    k, exits, hinted, seed = FINGERPRINT_MAZE
    graph = maze_graphs(k, hinted, seed + 1, n_exits=exits)[seed]
    prompts = state_prompts(graph, ChatRenderer(AutoTokenizer.from_pretrained(resolve_model(model))), markov_loop())
    h = hashlib.sha256()
    for s in sorted(prompts):
        h.update(s.encode() + b"\0" + np.asarray(prompts[s], np.int64).tobytes())
    return h.hexdigest()


def cell_key(cond: tuple[int, int, int, int, int], arm: str, seed: int = SEED, prefix: str = "cal-") -> str:
    """e.g. ``cal-k5-x2-h12-4x8-oracle-s0`` (a calibration cell); ``prefix=""`` for a study cell."""
    k, exits, hinted, groups, size = cond
    return f"{prefix}k{k}-x{exits}-h{hinted}-{groups}x{size}-{arm}-s{seed}"


def grid(root: Path = ROOT) -> list[Cell]:
    """The calibration (every candidate × arm, seed 0), then — once the rule names ``CONDITION`` — the
    study: K = 5 seeds 1 .. n (n from ``seeds_planned``; seed 0 is the calibration's, run before the rule and
    not part of the study), then the K = 1 control's, every arm per seed."""
    cal = [Cell("junction_llm_v2", cell_key(c, arm), {"k": c[0], "exits": c[1], "hinted": c[2], "groups": c[3],
                                                       "size": c[4], "arm": arm, "iterations": ITERATIONS,
                                                       "panel": PANEL, "dtype": "float32"}, SEED)
           for c in CANDIDATES for arm in ARMS]
    if CONDITION is None:
        return cal
    n = seeds_planned([r["row"] for r in finished(root, "junction_llm_v2") if not r["key"].startswith("cal-")])
    return cal + [study_cell(k, arm, seed) for k in (5, 1) for seed in range(1, n + 1) for arm in STUDY_ARMS]


def panel_size(k: int, exits: int, hinted: int) -> int:
    """Mazes of a cell's greedy held-out panel: ``PANEL``, or every eval-split maze where the split has fewer
    (K = 1 with 2 exits and 12 hinted cues: 129; a panel draws without replacement). The cells leave the env's
    ``n_cues`` at the env's default (``N_CUES``)."""
    from agentrl_envs.junction.env import N_CUES
    from agentrl_envs.junction.maze import split_mazes

    return min(PANEL, len(split_mazes(k, N_CUES, exits, "eval", hinted)))


def study_cell(k: int, arm: str, seed: int) -> Cell:
    """A study cell at ``CONDITION`` with K = ``k``: key e.g. ``k5-x2-h12-4x8-g2po-s3``; exact held-out success
    at every ``HELD_OUT_AT`` checkpoint, greedy on the panel (``panel_size``) at the last."""
    exits, hinted, groups, size = CONDITION
    return Cell("junction_llm_v2", cell_key((k, exits, hinted, groups, size), arm, seed, prefix=""),
                {"k": k, "exits": exits, "hinted": hinted, "groups": groups, "size": size, "arm": arm,
                 "iterations": ITERATIONS, "panel": panel_size(k, exits, hinted), "dtype": "float32",
                 "held_out_at": list(HELD_OUT_AT)}, seed)


def primary(row: dict) -> float | None:
    """The primary endpoint of a row: the exact held-out success of its ``PRIMARY_AT`` checkpoint (None for a
    calibration row: ``results/CALIBRATION_EXACT`` holds theirs)."""
    return (row.get("held_out_exact") or {}).get(str(PRIMARY_AT))


def seeds_planned(rows: list[dict]) -> int:
    """The rule's seed count: ``FIRST_SEEDS`` (seeds 1 .. FIRST_SEEDS) until GRPO and the oracle have them at
    K = 5; then n = max(FIRST_SEEDS, ceil((2.8 s / GAP)^2)), at most ``MAX_SEEDS``, where s (points) is the SD
    over those seeds of oracle − GRPO on the primary endpoint (80 % power for ``GAP`` at a 5 % two-sided level).

    Args:
        rows: study rows (``run``'s), any K and arm."""
    first = range(1, FIRST_SEEDS + 1)
    by = {(r["arm"], r["seed"]): primary(r) for r in rows if r["k"] == 5 and r["seed"] in first}
    if any(by.get((arm, s)) is None for arm in ("grpo", "oracle") for s in first):
        return FIRST_SEEDS
    d = 100 * np.array([by[("oracle", s)] - by[("grpo", s)] for s in first])
    return int(min(MAX_SEEDS, max(FIRST_SEEDS, math.ceil((2.8 * float(d.std(ddof=1)) / GAP) ** 2))))


def overrides(cfg: dict, run_name: str) -> list[str]:
    """The cell's config overrides on top of ``junction_llm.config_for``."""
    env = {"k": cfg["k"], "n_exits": cfg["exits"], "n_hinted": cfg["hinted"]}
    return [f"env.kwargs={json.dumps(env)}", f"rollout.groups_per_iteration={cfg['groups']}",
            f"rollout.group_size={cfg['size']}", "update.sampler_kl_every=0", f"run.name={run_name}",
            "run.save_every=1"]


def summarize(per_iter: list[dict], iterations: int) -> dict:
    """Success AUC (mean training success over iterations 1..n) at each reached checkpoint, and the
    mean first-junction accuracy."""
    succ = [p["success"] for p in per_iter]
    return {"auc": {str(n): float(np.mean(succ[:n])) for n in CHECKPOINTS if n <= min(iterations, len(succ))},
            "first_junction": float(np.mean([p["first_junction_right"] for p in per_iter])) if per_iter else None}


def run(cell: Cell, run_dir: Path) -> dict:
    """The runner's ``run``: check the prompt pin, train (or resume), evaluate the final checkpoint.

    Raises:
        RuntimeError: the prompt differs from the pinned one (``PROMPT_SHA256``)."""
    from studies.junction_llm import evaluate_row, run_cell

    sha = prompt_fingerprint()
    if PROMPT_SHA256 and sha != PROMPT_SHA256:
        raise RuntimeError(f"the rollout's prompt changed (sha256 {sha[:12]}…, pinned {PROMPT_SHA256[:12]}…): cells "
                           "rendered with another prompt are not comparable; re-pin as a new study")
    cfg = cell.config
    row = run_cell(cfg["arm"], cfg["k"], cell.seed, cfg["iterations"], run_dir.parent, cfg["dtype"],
                   overrides(cfg, run_dir.name))
    row["eval"] = evaluate_row(row, cfg["panel"])
    at = cfg.get("held_out_at", ())
    vals = exact_held_out(run_dir, [str(Path(row["checkpoint"]).parent / f"iter_{n:06d}") for n in at])
    row["held_out_exact"] = dict(zip(map(str, at), vals))
    row.update(summarize(row["per_iter"], cfg["iterations"]), prompt_sha256=sha)
    return row


def exact_held_out(run_dir: Path, checkpoints: list[str | None], n: int = EXACT_PANEL) -> list[float]:
    """Exact held-out success: V^π(start) of the sampled policy (temperature 1, constrained, as trained),
    averaged over the first ``n`` eval-split mazes, one forward per distinct prompt (``PolicyTables``) — no
    sampling noise, unlike a greedy panel whose argmax moves in steps.

    Args:
        run_dir: a cell's run folder (its ``config.yaml``: the maze's kwargs, the policy).
        checkpoints: checkpoint folders; None is the untrained model.
    Returns:
        one float per checkpoint, in [0, 1]."""
    from agentrl.credit.exact import exact_values
    from agentrl.eval import load_eval_policy
    from agentrl.train.checks import load_checked_config
    from studies.junction_untrained import maze_graphs
    from studies.llm_maze import PolicyTables, markov_loop
    from studies.oracle_arm import oracle_registered

    with oracle_registered():
        cfg = load_checked_config(Path(run_dir) / "config.yaml", [])
    kw = dict(cfg.env.kwargs)
    graphs = maze_graphs(kw.pop("k"), kw.pop("n_hinted"), n, cfg.env.max_turns, split="eval", **kw)
    out = []
    for ckpt in checkpoints:
        policy = load_eval_policy(cfg, ckpt)
        tables = PolicyTables(policy.model, policy.renderer, markov_loop(cfg.env.max_turns), policy.engine.pad_token_id)
        out.append(float(np.mean([exact_values(g, tables.graph_policy(g)[0]).v(0, g.start) for g in graphs])))
    return out


STUDY = Study("junction_llm_v2", grid, run)
UNTRAINED = "junction_llm_v2_untrained.json"  #: results/: the untrained model's greedy success per candidate
CALIBRATION_EXACT = "junction_llm_v2_calibration_exact.json"  #: results/: the calibration's exact held-out success


def calibration_exact(root: Path = ROOT) -> dict:
    """The exact held-out success (``exact_held_out``, ``EXACT_PANEL`` mazes) of every calibration cell's
    checkpoints at ``HELD_OUT_AT`` and of the untrained model per candidate; written to
    ``results/CALIBRATION_EXACT``.

    Returns:
        {"cells": {key: {"8": float, "16": float, "30": float}}, "untrained": {"k5-x2-h12": float, ...},
         "mazes": EXACT_PANEL, "seconds": float}.
    Raises:
        FileNotFoundError: a calibration cell has not run (no run folder with its checkpoints)."""
    t0, cells, base = time.time(), {}, {}
    for c in CANDIDATES:
        for arm in ARMS:
            run_dir = root / "runs" / "junction_llm_v2" / cell_key(c, arm)
            ckpts = [run_dir / "checkpoints" / f"iter_{n:06d}" for n in HELD_OUT_AT]
            if not all(p.is_dir() for p in ckpts):
                raise FileNotFoundError(f"{run_dir}: checkpoints {HELD_OUT_AT} missing; run the calibration first")
            cells[run_dir.name] = dict(zip(map(str, HELD_OUT_AT), exact_held_out(run_dir, [str(p) for p in ckpts])))
        base[f"k{c[0]}-x{c[1]}-h{c[2]}"] = exact_held_out(run_dir, [None])[0]
    out = {"cells": cells, "untrained": base, "mazes": EXACT_PANEL, "seconds": time.time() - t0}
    (root / "results" / CALIBRATION_EXACT).write_text(json.dumps(out, indent=1))
    return out


def untrained(root: Path = ROOT) -> dict:
    """Greedy success of the untrained SmolLM2 (no adapter) on each candidate's panel, under the config a
    calibration cell's run wrote (one of its cells must have started); written to ``results/UNTRAINED``.

    Returns:
        {"rows": [{"k", "exits", "hinted", "groups", "size", "eval": evaluate_row's dict}]}.
    Raises:
        FileNotFoundError: no run folder of a candidate's calibration cells under ``root``."""
    from studies.junction_llm import evaluate_row

    rows = []
    for c in CANDIDATES:
        dirs = [root / "runs" / "junction_llm_v2" / cell_key(c, arm) for arm in ARMS]
        run_dir = next((d for d in dirs if (d / "config.yaml").is_file()), None)
        if run_dir is None:
            raise FileNotFoundError(f"no config.yaml in {dirs[0]} (or its other arms'): start the calibration "
                                    f"cell {dirs[0].name} first")
        ev = evaluate_row({"run_dir": str(run_dir), "checkpoint": None}, PANEL)
        rows.append({**dict(zip(("k", "exits", "hinted", "groups", "size"), c)), "eval": ev})
    out = {"rows": rows, "prompt_sha256": prompt_fingerprint()}
    (root / "results" / UNTRAINED).write_text(json.dumps(out, indent=1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fingerprint", action="store_true", help="print the current prompt's sha256")
    ap.add_argument("--untrained", action="store_true", help=f"the untrained model's greedy success on each "
                                                             f"candidate's panel -> results/{UNTRAINED}")
    ap.add_argument("--calibration-exact", action="store_true", help="the calibration cells' exact held-out "
                                                                     f"success -> results/{CALIBRATION_EXACT}")
    ap.add_argument("--root", type=Path, default=ROOT)
    args = ap.parse_args()
    if args.fingerprint:
        print(prompt_fingerprint())
    if args.calibration_exact:
        for key, v in calibration_exact(args.root)["cells"].items():
            print(key, " / ".join(f"{100 * x:.1f}" for x in v.values()))
    if args.untrained:
        for r in untrained(args.root)["rows"]:
            print(f"K {r['k']}, {r['exits']} exits, {r['hinted']} hinted: greedy {r['eval']['successes']} / "
                  f"{r['eval']['n']}")


if __name__ == "__main__":
    main()

"""Issue 51's LLM study on the junction maze: step credit against GRPO with the budget and the endpoint
to show it. This module holds its **calibration** (before the rule): one seed of GRPO and of the oracle
on each of the two candidate conditions the tabular map (``junction_map``, lr calibrated on the pilot)
ranks best among those where the untrained SmolLM2 succeeds often enough to learn from sampled groups.

A cell trains ``junction_llm.run_cell`` (``examples/grpo_junction.yaml``: SmolLM2-135M-Instruct, LoRA top 6
layers, Markov prompt, constrained decoding, one PPO step per iteration) at the candidate's K, exits, hinted
cues and groups × group size, **fp32** (bf16 is ~13× slower on AVX2 hosts and puts the oracle's π off by
0.12–0.23 nats), ``update.sampler_kl_every: 0`` (the fp32 in-process sampler is the trainer), for
``ITERATIONS`` iterations; then greedy success of the final checkpoint on ``PANEL`` eval-split mazes. Its
row: the per-iteration training success and first-junction accuracy, the success AUC at the map's
checkpoints, the held-out greedy success, seconds, and the prompt's fingerprint.

**The prompt is pinned** (``PROMPT_SHA256``): the sha256 of the token ids of every state prompt of one
fixed maze as the rollout renders them (``llm_maze.state_prompts``, the SmolLM2 chat template, the
env's text). A cell refuses to start when it differs — a change to the prompt (issue 48 changed turn 0's)
would make cells incomparable; re-pinning is a new study.

Usage::

    .venv/bin/python -m studies.runner --study junction_llm_v2 --left
    .venv/bin/python -m studies.junction_llm_v2 --fingerprint     # the current prompt's sha256
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np

from studies.runner import Cell, Study

ITERATIONS, PANEL, SEED = 30, 256, 0
CHECKPOINTS = (8, 16, 30)
#: (K, exits, hinted cues, groups, group size): the map's two best candidates (benchmarks/RESULTS.md,
#: "Step credit on an LLM"): among the K = 5 conditions where the untrained SmolLM2 wins >= 5 % (a 4 x 8
#: iteration then sees >= 1.6 wins to learn from), the two with the largest oracle - GRPO on held-out greedy
#: success at 16 iterations of the lr-calibrated map: 2 exits with 12 hinted cues (+16.3 [+15.1, +17.5];
#: SmolLM2 10.7 %) and 3 exits with 20 hinted (+8.1 [+6.9, +9.3]; 5.1 %). The pilot's 2 exits / 20 hinted: +1.9.
CANDIDATES: tuple[tuple[int, int, int, int, int], ...] = ((5, 2, 12, 4, 8), (5, 3, 20, 4, 8))
ARMS = ("grpo", "oracle")
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


def cell_key(cond: tuple[int, int, int, int, int], arm: str, seed: int = SEED) -> str:
    """e.g. ``cal-k5-x2-h12-4x8-oracle-s0``."""
    k, exits, hinted, groups, size = cond
    return f"cal-k{k}-x{exits}-h{hinted}-{groups}x{size}-{arm}-s{seed}"


def grid() -> list[Cell]:
    """The calibration: every candidate × arm, seed 0."""
    return [Cell("junction_llm_v2", cell_key(c, arm), {"k": c[0], "exits": c[1], "hinted": c[2], "groups": c[3],
                                                        "size": c[4], "arm": arm, "iterations": ITERATIONS,
                                                        "panel": PANEL, "dtype": "float32"}, SEED)
            for c in CANDIDATES for arm in ARMS]


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
    row.update(summarize(row["per_iter"], cfg["iterations"]), prompt_sha256=sha)
    return row


STUDY = Study("junction_llm_v2", grid, run)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fingerprint", action="store_true", help="print the current prompt's sha256")
    args = ap.parse_args()
    if args.fingerprint:
        print(prompt_fingerprint())


if __name__ == "__main__":
    main()

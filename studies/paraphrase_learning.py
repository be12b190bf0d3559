"""The learning comparison where states never repeat (issue 50): GRPO, GiGPO, BEACON, OPRL and the
exact oracle trained on ``agentrl/JunctionMaze-v0`` at ``paraphrase`` 1 (no room worded alike by two
members of a group, so GiGPO's anchor groups are singletons and it is GRPO by construction), K = 5,
SmolLM2-135M-Instruct, fp32, seeds 0-2.

Each cell is ``studies.junction_llm.run_cell`` (``examples/grpo_junction.yaml`` + the arm's estimator,
the per-iteration endpoints of the collected episodes: first-junction accuracy, success) with
``env.kwargs.paraphrase=1``; the oracle's π per room is averaged over the member's share of the
wording bank (``studies.oracle_arm``). Cells are sized by the slowest arm, the oracle: 8 iterations
(the junction_llm pilot's budget; at paraphrase 1 each oracle call scores B/G = 2 wordings per room per
member instead of 1 prompt per room). The arms' readout: arm − GRPO on the mean first-junction
accuracy over the 8 iterations, with paired t intervals over the 3 seeds (``junction_llm.paired``).

Usage::

    .venv/bin/python -m studies.runner --study paraphrase_learning --left
    .venv/bin/python -m studies.runner --status --study paraphrase_learning
"""

from __future__ import annotations

from pathlib import Path

from studies.runner import ROOT, Cell, Study

ARMS = ("grpo", "gigpo", "beacon", "oprl", "oracle")
ITERATIONS, K, SEEDS = 8, 5, (0, 1, 2)
EXTRA = ("env.kwargs.paraphrase=1",)


def make_cell(arm: str, seed: int) -> Cell:
    """The cell of (arm, seed): key e.g. ``k5-oprl-fp32-s0``."""
    return Cell("paraphrase_learning", f"k{K}-{arm}-fp32-s{seed}", {"arm": arm, "k": K, "iterations": ITERATIONS,
                                                                      "dtype": "float32", "extra": list(EXTRA)}, seed)


def grid(root: Path = ROOT) -> list[Cell]:
    """Seed by seed, every arm (so a partial run compares arms on the same seeds)."""
    return [make_cell(arm, seed) for seed in SEEDS for arm in ARMS]


def _run(cell: Cell, run_dir: Path) -> dict:
    from studies.junction_llm import run_cell

    c = cell.config
    return run_cell(c["arm"], c["k"], cell.seed, c["iterations"], run_dir.parent, c["dtype"],
                    [*c["extra"], f"run.name={run_dir.name}", "run.save_every=1"])


STUDY = Study("paraphrase_learning", grid, _run)

"""The untrained SmolLM2 on the junction maze, per condition of issue 51's map, and the role prior
of the map's tabular policy calibrated from it.

For every (K, exits, hinted cues) of ``junction_map.CONDITIONS`` and each of ``--mazes`` train-split
mazes: π in every state from one forward per distinct prompt (``llm_maze.PolicyTables``, the
rollout's Markov prompt with constrained decoding, fp32), then

- the **exact success** V^π(start) (``agentrl.credit.exact``), mean over mazes with a 95 %
  bootstrap interval: the untrained success a condition implies on the LLM;
- per number of exits, the mean probability of one action of each role (``role_policy.role_means``
  over every state of that exits' conditions) and its log, the prior θ of ``role_policy.RolePolicy``.

Usage: ``python -m studies.junction_prior [--mazes 16]``; writes ``results/junction_prior.json``;
``--summary`` prints its tables. ~1 s per forward (fp32, 1 thread).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

OUT = Path(__file__).parent / "results" / "junction_prior.json"


def measure(conditions: list[tuple[int, int, int]], n_mazes: int, model: str = "smollm2-135m-instruct",
            max_turns: int = 24) -> dict:
    """The JSON of the module doc: ``rows`` (one per condition: k, exits, hinted, mazes, success,
    ci, forwards), ``role_means`` and ``prior`` per exits (str keys), the run's condition."""
    import torch
    from transformers import AutoTokenizer

    from agentrl.credit.exact import exact_values
    from agentrl.llm.chat import ChatRenderer
    from agentrl.llm.hf import HFEngine
    from agentrl.llm.models import resolve_model
    from studies.junction_untrained import bootstrap_ci, maze_graphs
    from studies.llm_maze import PolicyTables, markov_loop
    from studies.role_policy import prior_logits, role_means

    torch.set_num_threads(1)
    path = resolve_model(model)
    engine = HFEngine.from_pretrained(path, dtype="float32", num_threads=1)
    tables = PolicyTables(engine.model, ChatRenderer(AutoTokenizer.from_pretrained(path)), markov_loop(max_turns),
                          engine.pad_token_id)
    t0, load0, rows, seen = time.time(), os.getloadavg()[0], [], {}
    for k, exits, hinted in conditions:
        f0, succ = tables.forwards, []
        for g in maze_graphs(k, hinted, n_mazes, max_turns, n_exits=exits):
            pi, _ = tables.graph_policy(g)
            seen.setdefault(exits, []).append((g, pi))
            succ.append(exact_values(g, pi).v(0, g.start))
        x = np.asarray(succ, np.float64)
        rows.append({"k": k, "exits": exits, "hinted": hinted, "mazes": len(x), "success": float(x.mean()),
                     "ci": bootstrap_ci(x), "forwards": tables.forwards - f0})
        print(_row(rows[-1]), flush=True)
    means = {str(e): role_means([g for g, _ in v], [p for _, p in v]) for e, v in sorted(seen.items())}
    return {"model": model, "dtype": "float32", "max_turns": max_turns, "mazes": "train split, env seeds 0..mazes-1",
            "date": time.strftime("%Y-%m-%d"), "host": platform.node(), "torch": torch.__version__,
            "wall_s": time.time() - t0, "load": [load0, os.getloadavg()[0]], "rows": rows, "role_means": means,
            "prior": {e: prior_logits(m) for e, m in means.items()}}


def _row(r: dict) -> str:
    return (f"| {r['k']} | {r['exits']} | {r['hinted']} | {r['mazes']} | {100 * r['success']:.1f} % | "
            f"[{100 * r['ci'][0]:.1f}, {100 * r['ci'][1]:.1f}] | {r['forwards']} |")


def summary(data: dict) -> str:
    """Markdown: the untrained success per condition, then the role means and θ per exits."""
    lines = ["| K | exits | hinted | mazes | exact success under π | 95 % CI | forwards |",
             "|---|---|---|---|---|---|---|"] + [_row(r) for r in data["rows"]]
    roles = sorted({r for m in data["role_means"].values() for r in m})
    lines += ["", "| exits | " + " | ".join(f"p({r})" for r in roles) + " |", "|---|" + "---|" * len(roles)]
    for e, m in data["role_means"].items():
        lines.append(f"| {e} | " + " | ".join(f"{m[r]:.3f}" if r in m else "–" for r in roles) + " |")
    return "\n".join(lines)


def load_prior(path: Path = OUT) -> dict[int, dict[str, float]]:
    """θ per number of exits from ``path`` ({exits: {role: logit}}).

    Raises:
        FileNotFoundError: no calibration yet (run ``python -m studies.junction_prior``)."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path} is missing: run `python -m studies.junction_prior` first (SmolLM2, ~20 min)")
    return {int(e): p for e, p in json.loads(Path(path).read_text())["prior"].items()}


def main() -> None:
    from studies.junction_map import CONDITIONS

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mazes", type=int, default=16)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--summary", action="store_true")
    args = ap.parse_args()
    if args.summary:
        print(summary(json.loads(args.out.read_text())))
        return
    conditions = sorted({(k, x, h) for k, x, h, _, _ in CONDITIONS}, key=lambda c: (-c[0], c[1], c[2]))
    data = measure(conditions, args.mazes)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1))
    print(summary(data))


if __name__ == "__main__":
    main()

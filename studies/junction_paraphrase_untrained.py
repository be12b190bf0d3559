"""Untrained SmolLM2's exact success on ``agentrl/JunctionMaze-v0`` at ``paraphrase`` 0 and 1.

As ``junction_untrained.py`` (train-split mazes at env seeds 0..n-1, the rollout's Markov prompt,
constrained decoding renormalised over the token trie, exact V^π(start) by backward induction, no
sampling), on the same mazes at both settings:

- ``paraphrase=0``: π from one forward per distinct prompt (``llm_maze.PolicyTables.graph_policy``).
- ``paraphrase=1`` (bank B = ``--bank``): an episode of member j of a group of G (``--group``) sees
  every room worded from its slice ``b % G == j`` of the room's bank, and its window prompt's task
  text is the entrance's first wording (one of that slice), so its exact success is V^π(start) of
  the (maze, first wording, member) values of ``PolicyTables.maze`` (π averaged over the member's
  wordings of each room). A maze's number is the mean over every member j and every first wording
  of its slice (``--firsts N``: only the first N of each slice, a subsample); the spread over them
  is reported too.

Usage: ``python -m studies.junction_paraphrase_untrained --ks 5 1 --mazes 4 8``
Writes ``results/junction_paraphrase_untrained.json``; ``--summary`` prints its Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from studies.junction_untrained import ENV_ID, bootstrap_ci, maze_graphs


def task_ids(k: int, n_hinted: int, n: int, max_turns: int) -> list[str]:
    """Task ids of the ``n`` train mazes at env seeds 0..n-1 (``junction_untrained.maze_graphs``)."""
    import gymnasium as gym

    env = gym.make(ENV_ID, k=k, split="train", n_hinted=n_hinted, max_turns=max_turns).unwrapped
    out = []
    for seed in range(n):
        env.reset(seed=seed)
        out.append(env.maze.task_id)
    env.close()
    return out


def paraphrased_success(tables, task_id: str, max_turns: int, group: int, firsts: int | None) -> list[float]:
    """V^π(start) per (member j < group, first wording of j's slice; the first ``firsts`` of it)."""
    from agentrl_envs.junction import paraphrase as para

    start_bank = para.bank(task_id, "r1.1", tables.paraphrase_bank)
    out = []
    for j in range(group):
        for first in start_bank[j::group][:firsts]:
            m = tables.maze(task_id, max_turns, first=first, member=(j, group))
            out.append(m.values.v(0, m.graph.start))
    return out


def summary(data: dict) -> str:
    """Markdown: one row per (K, paraphrase)."""
    lines = ["| K | paraphrase | mazes | exact success under π | 95 % CI | per-maze spread over (member, first "
             "wording) | prompts scored | wall s |", "|---|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        spread = "-" if r["paraphrase"] == 0 else f"{100 * r['spread_mean']:.1f} pp (mean max-min)"
        lines.append(f"| {r['k']} | {r['paraphrase']} | {r['mazes']} | {100 * r['success']:.1f} % | "
                     f"[{100 * r['ci'][0]:.1f}, {100 * r['ci'][1]:.1f}] | {spread} | {r['prompts']} | "
                     f"{r['wall_s']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ks", type=int, nargs="+", default=[5, 1])
    ap.add_argument("--mazes", type=int, nargs="+", default=[4, 8], help="mazes per K (one number per --ks entry)")
    ap.add_argument("--hinted", type=int, default=20)
    ap.add_argument("--bank", type=int, default=16)
    ap.add_argument("--group", type=int, default=8, help="G: members per group (examples/grpo_junction.yaml: 8)")
    ap.add_argument("--firsts", type=int, default=None, help="first wordings per member (default: its whole slice)")
    ap.add_argument("--max-turns", type=int, default=24)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "junction_paraphrase_untrained.json"))
    ap.add_argument("--summary", action="store_true")
    args = ap.parse_args()
    if args.summary:
        print(summary(json.loads(Path(args.out).read_text())))
        return
    if len(args.mazes) != len(args.ks):
        ap.error("--mazes needs one count per --ks entry")
    import torch
    from transformers import AutoTokenizer

    from agentrl.credit.exact import exact_values
    from agentrl.llm.chat import ChatRenderer
    from agentrl.llm.hf import HFEngine
    from agentrl.llm.models import resolve_model
    from studies.llm_maze import PolicyTables, markov_loop

    torch.set_num_threads(1)
    path = resolve_model(args.model)
    engine = HFEngine.from_pretrained(path, dtype="float32", num_threads=1)
    renderer = ChatRenderer(AutoTokenizer.from_pretrained(path))
    loop = markov_loop(args.max_turns)
    plain = PolicyTables(engine.model, renderer, loop, engine.pad_token_id)
    para_tables = PolicyTables(engine.model, renderer, loop, engine.pad_token_id, paraphrase_bank=args.bank)
    t0, load0, rows, per_maze = time.time(), os.getloadavg()[0], [], {}
    for k, n in zip(args.ks, args.mazes):
        ids = task_ids(k, args.hinted, n, args.max_turns)
        for paraphrase in (0, 1):
            t1, tables = time.time(), (para_tables if paraphrase else plain)
            f0, succ, spread = tables.forwards, [], []
            if paraphrase:
                for tid in ids:
                    v = paraphrased_success(tables, tid, args.max_turns, args.group, args.firsts)
                    succ.append(float(np.mean(v)))
                    spread.append(float(np.max(v) - np.min(v)))
                    per_maze[f"k{k}/p1/{tid}"] = v
            else:
                for g in maze_graphs(k, args.hinted, n, args.max_turns):
                    pi, _ = tables.graph_policy(g)
                    succ.append(exact_values(g, pi).v(0, g.start))
            x = np.asarray(succ, np.float64)
            rows.append({"k": k, "paraphrase": paraphrase, "mazes": len(x), "task_ids": ids, "success": float(x.mean()),
                         "ci": bootstrap_ci(x), "per_maze": x.tolist(),
                         "spread_mean": float(np.mean(spread)) if spread else 0.0,
                         "prompts": tables.forwards - f0, "wall_s": time.time() - t1})
            print(summary({"rows": rows[-1:]}).splitlines()[-1], flush=True)
    data = {"config": {"model": args.model, "dtype": "float32", "max_turns": args.max_turns, "n_hinted": args.hinted,
                       "paraphrase_bank": args.bank, "group": args.group,
                       "firsts": "every first wording of each member's slice" if args.firsts is None
                       else f"the first {args.firsts} of each member's slice",
                       "mazes": "train split, env seeds 0..mazes-1 (the same mazes at paraphrase 0 and 1)",
                       "loop": "markov_loop (window_k 0, admissible, constrained decoding)", "temperature": 1.0,
                       "success": "paraphrase 0: V^pi(start); 1: mean over (member j < group, first wording) of the "
                                  "exact V^pi(start) with pi averaged over the member's wordings of each room"},
            "date": time.strftime("%Y-%m-%d"), "host": platform.node(), "torch": torch.__version__,
            "wall_s": time.time() - t0, "load": [load0, os.getloadavg()[0]], "rows": rows,
            "per_maze_paraphrased": per_maze}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(data, indent=1))
    print(summary(data))


if __name__ == "__main__":
    main()

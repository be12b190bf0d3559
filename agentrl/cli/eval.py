"""``agentrl eval CONFIG [--checkpoint DIR] [--sampled] [--seed S] [--store PATH] [--out FILE] [key=value ...]``.

Plays the config's eval panel (``env.eval_panel_size`` distinct tasks of ``env.eval_split``,
drawn without replacement from the env's task list) once per task, greedily unless
``--sampled``, with the policy of the config or the trainable weights of a checkpoint folder
(``runs/NAME/checkpoints/iter_000010``), and prints the success rate with its 95 % Wilson
and bootstrap intervals, the evaluation seed and the panel hash.

``--seed S`` (default ``run.eval_seed``) seeds sampled decoding: the same seed repeats the
draw, another seed draws anew. ``--store PATH`` writes the episodes to a turn store under
the run id ``--run-id`` (default ``<run.name>/eval-<mode>-s<seed>``, ``-2``... when taken)
for ``agentrl replay`` and the viewer; every turn's ``info["eval"]`` holds seed, mode and
panel hash. ``--out FILE`` writes the result as JSON (seed, panel hash, intervals, per-task
outcomes). A checkpoint inside a run folder checks the panel against the run's
``eval_panel.json`` and says when its task content changed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(subparsers) -> None:
    """Add the ``eval`` sub-command."""
    p = subparsers.add_parser("eval", help="evaluate a policy on the held-out panel", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", metavar="CONFIG", help="YAML config (see examples/)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides")
    p.add_argument("--checkpoint", default=None, help="checkpoint folder whose weights to evaluate")
    p.add_argument("--sampled", action="store_true", help="sample at policy.temperature instead of greedy")
    p.add_argument("--seed", type=int, default=None, help="evaluation seed (default: run.eval_seed)")
    p.add_argument("--store", default=None, metavar="PATH", help="write the eval episodes to this turn store")
    p.add_argument("--run-id", default=None, help="run id of the stored episodes (with --store)")
    p.add_argument("--out", default=None, metavar="FILE", help="write the result as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Handler: load the policy (and checkpoint), evaluate, print (and store / write) the result."""
    from agentrl.train.checks import load_checked_config

    cfg = load_checked_config(args.config, args.overrides)  # env id and kwargs, loss, estimator: before the model loads
    from rich.console import Console

    from agentrl.eval import eval_panel, evaluate, fresh_run_id, load_eval_policy, record_panel
    from agentrl.store import EVAL_RUN

    console = Console()
    panel = eval_panel(cfg)  # before the model loads: a panel larger than its split fails here
    seed = cfg.run.eval_seed if args.seed is None else args.seed
    mode = "sampled" if args.sampled else "greedy"
    run_dir = _run_dir_of(args.checkpoint)
    if run_dir is not None:
        change = record_panel(run_dir, panel)
        if change:
            console.print(f"warning: {change}", style="yellow", highlight=False, markup=False)
    policy = load_eval_policy(cfg, args.checkpoint)
    store = None
    if args.store:
        from agentrl.store import TurnStore

        store = TurnStore(args.store)
    try:
        run_id = (args.run_id or fresh_run_id(store, f"{cfg.run.name}{EVAL_RUN}{mode}-s{seed}")) if store else ""
        result, _ = evaluate(policy.engine, policy.renderer, cfg, greedy=not args.sampled, seed=seed, progress=True,
                             store=store, run_id=run_id, panel=panel, label=str(args.checkpoint or cfg.policy.model))
    finally:
        if store is not None:
            store.close()
    console.print(result.line(), highlight=False)
    if store is not None:
        console.print(f"stored: agentrl replay {args.store} --run {run_id}", highlight=False, markup=False,
                      soft_wrap=True)
    if args.out:
        body = {**result.to_dict(), "env_id": cfg.env.id, "split": cfg.env.eval_split, "panel_size": len(panel),
                "checkpoint": args.checkpoint, "config": str(args.config)}
        Path(args.out).write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
    return 0


def _run_dir_of(checkpoint: str | None) -> Path | None:
    """The run folder of ``runs/NAME/checkpoints/iter_N`` (None for another path)."""
    if checkpoint is None:
        return None
    ckpt = Path(checkpoint).resolve()
    return ckpt.parent.parent if ckpt.parent.name == "checkpoints" and (ckpt.parent.parent / "config.yaml").is_file() \
        else None

"""``agentrl train CONFIG [key=value ...]``: train a policy as one YAML config describes.

Overrides use dotted keys, e.g. ``agentrl train examples/gigpo_textworld.yaml
run.iterations=2 update.lr=1e-4``. The run folder (``run.out_dir/run.name``) receives
config.yaml (every default in effect), store.sqlite, metrics.jsonl and checkpoints/; a run
that already has a checkpoint resumes from it unless ``--no-resume``.

Data-parallel on N processes (FSDP2; gloo on CPU, NCCL on GPU): ``torchrun --nproc-per-node N
-m agentrl train CONFIG``. Rank 0 rolls out, writes the store and logs; every rank trains its
share of each minibatch. docs/scaling.md has the commands for one GPU, eight GPUs and nodes.
"""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    """Add the ``train`` sub-command."""
    p = subparsers.add_parser("train", help="train a policy from a YAML config", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", metavar="CONFIG", help="YAML config (see examples/)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, e.g. update.lr=1e-4")
    p.add_argument("--no-resume", action="store_true", help="ignore an existing checkpoint in the run folder")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Handler: load and validate the config (before any rollout), train, print the summary."""
    from agentrl.config import load_config

    cfg = load_config(args.config, args.overrides)
    from rich.console import Console

    from agentrl.cli._summary import print_run_summary
    from agentrl.train import train

    result = train(cfg, resume=not args.no_resume)
    if not result.is_main:  # torchrun: ranks other than 0 trained their shards; rank 0 reports
        return 0
    import sys

    wide = None if sys.stdout.isatty() else 160  # a log file keeps the whole table, not 80 columns
    print_run_summary(Console(width=wide), result.run_dir, result.run_id, result.evals)
    return 0

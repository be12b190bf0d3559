"""``agentrl eval CONFIG [--checkpoint DIR] [--sampled] [key=value ...]``: held-out success.

Plays the config's eval panel (``env.eval_split``, ``env.eval_panel_size`` tasks) once per
task, greedily unless ``--sampled``, with the policy of the config or the trainable weights
of a checkpoint folder (``runs/NAME/checkpoints/iter_000010``), and prints the success rate
with its 95 % Wilson and bootstrap intervals and the panel hash.
"""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    """Add the ``eval`` sub-command."""
    p = subparsers.add_parser("eval", help="evaluate a policy on the held-out panel", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", metavar="CONFIG", help="YAML config (see examples/)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides")
    p.add_argument("--checkpoint", default=None, help="checkpoint folder whose weights to evaluate")
    p.add_argument("--sampled", action="store_true", help="sample at policy.temperature instead of greedy")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Handler: load the policy (and checkpoint), evaluate, print the result."""
    from agentrl.config import load_config

    cfg = load_config(args.config, args.overrides)
    from rich.console import Console

    from agentrl.eval import evaluate, load_eval_policy

    policy = load_eval_policy(cfg, args.checkpoint)
    result, _ = evaluate(policy.engine, policy.renderer, cfg, greedy=not args.sampled, progress=True)
    mode = "sampled" if args.sampled else "greedy"
    Console().print(f"{mode} success {result.success_rate:.1%} ({result.successes}/{result.n}), "
                    f"95% Wilson [{result.wilson[0]:.1%}, {result.wilson[1]:.1%}], bootstrap "
                    f"[{result.bootstrap[0]:.1%}, {result.bootstrap[1]:.1%}], mean turns {result.mean_turns:.2f}, "
                    f"failed {result.failed}, panel {result.panel_sha256[:12]}", highlight=False)
    return 0

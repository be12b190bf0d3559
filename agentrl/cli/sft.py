"""``agentrl sft CONFIG [key=value ...]``: SFT warm-start on expert walkthroughs.

CONFIG is an ``agentrl train`` config (env, policy, update, run sections) with an optional
``sft:`` section (episodes, epochs, lr, batch_turns, micro_batch, grad_clip, seed,
num_slots, out). The walkthroughs are rendered exactly as the RL prompts; the result is an
HF folder (default ``run.out_dir/run.name/sft``) to train from with
``agentrl train CONFIG policy.model=<folder>``.
"""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    """Add the ``sft`` sub-command."""
    p = subparsers.add_parser("sft", help="supervised warm-start on expert walkthroughs", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", metavar="CONFIG", help="YAML config (a train config, optional sft: section)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, e.g. sft.epochs=3 policy.model=...")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Handler: parse and validate, replay walkthroughs, train, print where the model went."""
    from agentrl.sft import load_sft_config, train_sft

    cfg, sft = load_sft_config(args.config, args.overrides)
    res = train_sft(cfg, sft)
    print(f"sft: {res.steps} steps on {res.turns} expert turns ({res.episodes} episodes) in {res.seconds:.1f} s; "
          f"loss {res.first_epoch_loss:.4f} -> {res.last_epoch_loss:.4f} nats/token")
    print(f"wrote {res.out_dir}; train from it with policy.model={res.out_dir} "
          f"(e.g. agentrl train TRAIN_CONFIG policy.model={res.out_dir})")
    return 0

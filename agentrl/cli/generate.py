"""``agentrl generate NAME --n N --seed S --out DIR``: write new tasks for a data-backed env.

Generators live with their env (``envs/<name>/generate.py``, exposing ``run(args) -> int``);
this command looks the module up by name at run time (a string, like gymnasium entry
points), so ``agentrl`` never imports ``agentrl_envs`` (the ``envs/`` folder) statically (DESIGN.md layering).

Known generators: ``alfworld`` — solvable ALFWorld games of all six task types, each
checked by the planner, in the ``json_2.1.1`` folder layout (ENVIRONMENTS.md §2.5).
"""

from __future__ import annotations

import argparse
import importlib

GENERATORS = {"alfworld": "agentrl_envs.alfworld.generate"}


def register(subparsers) -> None:
    p = subparsers.add_parser("generate", help="generate new tasks for an env (e.g. ALFWorld games)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", choices=sorted(GENERATORS), help="which generator")
    p.add_argument("--n", type=int, required=True, help="number of tasks to write")
    p.add_argument("--seed", type=int, default=0, help="generator seed (same seed, same tasks)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--task-types", nargs="+", default=None, help="ALFWorld task types (default: all six)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Dispatch to ``envs.<name>.generate.run``. Raises ``ImportError`` when the envs
    package (or the env's extra) is not installed."""
    module = importlib.import_module(GENERATORS[args.name])
    if args.task_types is None:
        args.task_types = list(module.TASK_TYPES)
    return int(module.run(args))

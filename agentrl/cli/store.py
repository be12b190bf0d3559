"""``agentrl store backup SRC DST``: a consistent copy of a turn store, even one still being written.

Copying only the ``.sqlite`` file of a live store (``cp``) misses what still sits in its
``-wal`` file. ``backup`` reads one snapshot of both through SQLite's backup API, checks it
and writes DST as one self-contained file (DST must not exist). Writers keep going meanwhile.
"""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    """Add the ``store`` sub-command (with its ``backup`` action) to ``subparsers``."""
    p = subparsers.add_parser("store", help="maintain turn stores (backup)", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="store_action", metavar="ACTION", required=True)
    b = actions.add_parser("backup", help="copy a turn store (live or not) to a new file",
                           description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("src", metavar="SRC", help="the turn store to copy")
    b.add_argument("dst", metavar="DST", help="the new file (must not exist)")
    b.set_defaults(func=run_backup)


def run_backup(args: argparse.Namespace) -> int:
    """Handler of ``agentrl store backup``; returns the exit code (0).

    Raises:
        FileNotFoundError: no store at SRC. FileExistsError: DST exists (exit 2 via ``main``).
        StoreDamagedError / StoreError: SRC is damaged or not a store of this schema version.
    """
    from rich.console import Console

    from agentrl.cli._text import text
    from agentrl.store import backup

    try:
        s = backup(args.src, args.dst)
    except FileExistsError as exc:
        raise ValueError(str(exc)) from exc  # the CLI's one-line errors: ValueError family
    Console().print(text(f"backed up {args.src} to {s.path}: {s.runs} runs, {s.episodes} episodes, {s.turns} turns, "
                         f"{s.bytes / 2**20:.1f} MiB"), highlight=False)
    return 0

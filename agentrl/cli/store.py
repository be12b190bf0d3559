"""``agentrl store backup SRC DST`` and ``agentrl store index PATH``: turn store maintenance.

``backup``: a consistent copy of a turn store, even one still being written. Copying only the
``.sqlite`` file of a live store (``cp``) misses what still sits in its ``-wal`` file;
``backup`` reads one snapshot of both through SQLite's backup API, checks it and writes DST
as one self-contained file (DST must not exist). Writers keep going meanwhile.

``index``: add the indexes of the current schema (the viewer's) to a store written before
they joined it (a write: about 1 s per million turns; any run appending to it does the same).
"""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    """Add the ``store`` sub-command (with its ``backup`` action) to ``subparsers``."""
    p = subparsers.add_parser("store", help="maintain turn stores (backup, index)", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="store_action", metavar="ACTION", required=True)
    b = actions.add_parser("backup", help="copy a turn store (live or not) to a new file",
                           description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("src", metavar="SRC", help="the turn store to copy")
    b.add_argument("dst", metavar="DST", help="the new file (must not exist)")
    b.set_defaults(func=run_backup)
    i = actions.add_parser("index", help="add the current schema's indexes to an older store",
                           description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    i.add_argument("path", metavar="PATH", help="the turn store")
    i.set_defaults(func=run_index)


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
    Console(soft_wrap=True).print(text(f"backed up {args.src} to {s.path}: {s.runs} runs, {s.episodes} episodes, {s.turns} turns, "
                         f"{s.bytes / 2**20:.1f} MiB"), highlight=False)
    return 0


def run_index(args: argparse.Namespace) -> int:
    """Handler of ``agentrl store index``; returns the exit code (0).

    Raises:
        FileNotFoundError: no store at PATH. StorePathError: PATH is read-only.
        StoreDamagedError / StoreError: PATH is damaged or not a store of this schema version.
    """
    from contextlib import closing

    from rich.console import Console

    from agentrl.cli._text import text
    from agentrl.store.schema import connect, missing_indexes

    with closing(connect(args.path, readonly=True)) as conn:
        missing = missing_indexes(conn)
    if missing:
        connect(args.path, check=False).close()  # a writable open creates every schema index that is missing
        msg = f"added {len(missing)} indexes to {args.path}: {', '.join(missing)}"
    else:
        msg = f"{args.path} has every index of the current schema; nothing to do"
    Console(soft_wrap=True).print(text(msg), highlight=False)
    return 0

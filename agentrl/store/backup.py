"""A consistent copy of a turn store, live or not, through SQLite's online backup API.

Copying only the ``.sqlite`` file of a store that a writer still holds open gives an older
state: committed transactions sit in the ``-wal`` file until a checkpoint copies them over
(a closing ``TurnStore`` does that; a killed one, or one that is still running, does not).
``backup`` reads one snapshot of the store, main file and WAL together, and writes it as one
self-contained file; writers keep writing meanwhile (WAL readers never block them).
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from agentrl.store.schema import check_integrity, connect


@dataclass(frozen=True, slots=True)
class BackupSummary:
    """What ``backup`` copied: the destination, its size (bytes) and row counts."""

    path: Path
    bytes: int
    runs: int
    episodes: int
    turns: int


def backup(src: str | Path, dst: str | Path) -> BackupSummary:
    """Copy the store ``src`` (one snapshot, WAL included) to the new file ``dst``.

    The copy is written to a hidden temporary file beside ``dst``, checked
    (``quick_check``, schema version) and renamed to ``dst``, so ``dst`` never holds a
    partial copy. It holds a read snapshot for as long as the copy runs (writers go on).

    Args:
        src: an existing turn store (may be open in writers).
        dst: the copy's path; must not exist (its directory is created).
    Returns:
        the ``BackupSummary`` of the copy.
    Raises:
        FileNotFoundError: no store at ``src``.
        FileExistsError: ``dst`` exists (nothing is overwritten).
        StoreDamagedError: ``src`` fails SQLite's integrity check (nothing is written).
        StoreError / SchemaVersionError: ``src`` is not a store of this schema version.
        StorePathError: ``dst``'s directory cannot be written.
    """
    src, dst = Path(src), Path(dst)
    if dst.exists():
        raise FileExistsError(f"backup destination {dst} exists; pick a new path or delete it first "
                              f"(a backup never overwrites a file)")
    if dst.resolve() == src.resolve():
        raise FileExistsError(f"backup destination {dst} is the source; pick a new path")
    with closing(connect(src, readonly=True)) as source:  # checks integrity and schema version
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            from agentrl.store.schema import StorePathError

            raise StorePathError(f"cannot create the directory of backup path {dst} ({exc.strerror}); "
                                 f"pass a path in a writable directory") from exc
        tmp = dst.with_name(f".{dst.name}.tmp-{os.getpid()}")
        try:
            with closing(sqlite3.connect(tmp, isolation_level=None)) as target:
                source.backup(target)  # pages=-1: every page in one step, from one snapshot
                check_integrity(target, dst, writing=True)
                runs, episodes, turns = target.execute(
                    "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM episodes), "
                    "(SELECT count(*) FROM turns)").fetchone()
            os.replace(tmp, dst)
        finally:
            for leftover in (tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-shm")):
                leftover.unlink(missing_ok=True)
    return BackupSummary(dst, dst.stat().st_size, int(runs), int(episodes), int(turns))

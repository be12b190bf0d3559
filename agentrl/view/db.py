"""Read connections to a turn store for the viewer, index hints and keyset pages.

The viewer never writes the store. It opens one fresh read-only connection per request
(``open_read``, ``mode=ro``), so pages stay current while a trainer keeps writing the file
(WAL: readers see the last committed transaction and never block the writer). The indexes
its pages use are part of the store schema (``agentrl.store.schema.VIEW_INDEXES``); on a
store written before them the pages run without them (``execute`` drops the hints) and
``index_warnings`` says how to add them.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Generic, Sequence, TypeVar

from agentrl.store.schema import TURN_BITS, connect, missing_indexes

T = TypeVar("T")

def open_read(path: Path, *, check: bool = False) -> sqlite3.Connection:
    """A new read-only connection (``mode=ro`` URI; ``immutable`` on a read-only file system)
    to the store at ``path``; it never writes the file.

    Args:
        check: run SQLite's integrity check (``quick_check``, ~1 s per million turns): the viewer
            does once at start-up, not per request.
    Raises:
        FileNotFoundError: no file at ``path``. StoreDamagedError: ``check`` and the file is
            damaged. StoreError / SchemaVersionError: not a store of this schema version.
    """
    return connect(path, readonly=True, check=check)


def index_warnings(conn: sqlite3.Connection, path: Path) -> list[str]:
    """A warning when the store lacks the schema's ``VIEW_INDEXES`` (written by an agentrl
    before they joined the schema); empty otherwise. Pages stay correct without them."""
    missing = missing_indexes(conn)
    if not missing:
        return []
    return [f"{path} was written before the viewer's indexes joined the store schema (missing: {', '.join(missing)}); "
            f"pages are correct but slower on large stores. Add them with `agentrl store index {path}` "
            f"(a write, about 1 s per million turns) or by any run that appends to the store"]


_HINT = re.compile(r"INDEXED BY view_\w+")


def execute(conn: sqlite3.Connection, sql: str, params: Sequence = ()) -> list[tuple]:
    """All rows of ``sql``, whose ``INDEXED BY view_*`` hints pin the viewer's indexes (SQLite
    without ``ANALYZE`` statistics may otherwise pick a primary key and scan). On a store
    without them (written before they joined the schema), the hints are dropped: same rows, slower."""
    try:
        return conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such index" not in str(exc):
            raise
        return conn.execute(_HINT.sub("", sql), params).fetchall()


def run_key(conn: sqlite3.Connection, run_id: str) -> int:
    """The integer key of ``run_id``.

    Raises:
        KeyError: unknown run (the message lists close names).
    """
    row = conn.execute("SELECT run_key FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    if row is None:
        from agentrl.registry import unknown_name_error

        raise unknown_name_error("run", run_id, [r[0] for r in conn.execute("SELECT run_id FROM runs")])
    return int(row[0])


def uid(key: int, turn_id: int) -> int:
    """``turns.uid`` of a turn: ``run_key << TURN_BITS | turn_id``."""
    return (int(key) << TURN_BITS) | int(turn_id)


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of rows in key order, with the cursors of its neighbours.

    Attributes:
        items: the rows (at most the page size).
        next_after: pass as ``after=`` for the next page; ``None`` on the last page.
        prev_before: pass as ``before=`` for the previous page; ``None`` on the first page.
    """

    items: list[T]
    next_after: int | None
    prev_before: int | None


def keyset_page(fetch: Callable[[str, list, int], Sequence[T]], key: Callable[[T], int], *,
                after: int | None, before: int | None, limit: int) -> Page[T]:
    """Keyset pagination (cost O(page), not O(offset)) over rows ordered by an int key.

    Args:
        fetch: ``fetch(op, params, n)`` runs the query with ``AND key_column {op}`` added
            when ``op`` is ``"> ?"`` or ``"< ?"`` (nothing when ``""``) and ``params`` bound
            to it, ordered by the key ascending — descending when ``op`` is ``"< ?"`` —
            returning at most ``n`` rows.
        key: the int key of a row.
        after / before: cursors from a previous page (``after`` wins when both are set).
        limit: page size (rows, ≥ 1).
    Raises:
        ValueError: ``limit`` < 1.
    """
    if limit < 1:
        raise ValueError(f"page size must be ≥ 1, got {limit}; pass a positive limit=")
    if before is not None and after is None:
        rows = list(fetch("< ?", [before], limit + 1))
        more = len(rows) > limit
        rows = rows[:limit][::-1]
        return Page(rows, key(rows[-1]) if rows else None, key(rows[0]) if rows and more else None)
    rows = list(fetch("> ?" if after is not None else "", [] if after is None else [after], limit + 1))
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(rows, key(rows[-1]) if rows and more else None, key(rows[0]) if rows and after is not None else None)

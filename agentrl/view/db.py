"""Read connections to a turn store for the viewer, its extra indexes and keyset pages.

The viewer never writes turns, episodes, advantages or metrics. It opens one fresh
read-only connection per request (``open_read``), so pages stay current while a trainer
keeps writing the file (WAL: readers see the last committed transaction and never block
the writer). At start-up it adds the indexes its pages need (``ensure_indexes``) with
``CREATE INDEX IF NOT EXISTS`` — the only write it ever makes, skipped with a warning when
the file cannot be written.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Generic, Sequence, TypeVar

from agentrl.store.schema import TURN_BITS, connect

T = TypeVar("T")

#: Indexes the viewer's queries use (name, DDL). Proposed for the store schema itself.
VIEW_INDEXES: tuple[tuple[str, str], ...] = (
    ("view_episodes_by_group", "CREATE INDEX IF NOT EXISTS view_episodes_by_group "
                               "ON episodes (run_key, group_id, episode_id)"),
    ("view_turns_by_group", "CREATE INDEX IF NOT EXISTS view_turns_by_group ON turns (run_key, group_id)"),
    ("view_turns_by_version", "CREATE INDEX IF NOT EXISTS view_turns_by_version "
                              "ON turns (run_key, policy_version, episode_id)"),
    ("view_advantages_by_iteration", "CREATE INDEX IF NOT EXISTS view_advantages_by_iteration "
                                     "ON advantages (run_key, iteration, estimator, value)"),
)


def open_read(path: Path) -> sqlite3.Connection:
    """A new read-only connection (``mode=ro`` URI) to the store at ``path``.

    Raises:
        FileNotFoundError: no file at ``path``. StoreError / SchemaVersionError: not a
            store of this schema version.
    """
    return connect(path, readonly=True)


def ensure_indexes(path: Path, *, busy_timeout_s: float = 60.0) -> list[str]:
    """Create the ``VIEW_INDEXES`` missing from the store (one write transaction).

    Building them takes the store's write lock for about 1 s per million turns; a trainer
    writing at the same time waits (busy timeout), it does not fail.

    Args:
        path: the store file.
        busy_timeout_s: seconds to wait for another process's write lock.

    Returns:
        warnings (empty when every index exists or was created); e.g. the file is read-only,
        in which case pages still work, only slower on large stores.
    """
    try:
        conn = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None)
    except sqlite3.Error as exc:  # pragma: no cover - connect rarely fails before a query
        return [f"cannot open {path} to add the viewer's indexes ({exc}); large stores will load slowly"]
    try:
        have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        missing = [ddl for name, ddl in VIEW_INDEXES if name not in have]
        if missing:
            conn.execute("BEGIN IMMEDIATE")
            for ddl in missing:
                conn.execute(ddl)
            conn.execute("COMMIT")
        return []
    except sqlite3.Error as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        return [f"cannot add the viewer's indexes to {path} ({exc}); pages work but load slowly on large "
                f"stores. Make the file writable once, or run `agentrl view` as its owner"]
    finally:
        conn.close()


_HINT = re.compile(r"INDEXED BY view_\w+")


def execute(conn: sqlite3.Connection, sql: str, params: Sequence = ()) -> list[tuple]:
    """All rows of ``sql``, whose ``INDEXED BY view_*`` hints pin the viewer's indexes (SQLite
    without ``ANALYZE`` statistics may otherwise pick a primary key and scan). On a store
    without them (read-only file), the hints are dropped: same rows, slower."""
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

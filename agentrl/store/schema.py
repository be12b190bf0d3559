"""SQLite schema of the turn store, connection setup and the store's errors.

Tables (all keyed by ``run_key``, the integer alias of a run id):

- ``meta(key, value)``: ``schema_version`` = ``agentrl.types.SCHEMA_VERSION``.
- ``runs(run_key, run_id, created_at)``.
- ``episodes``: one row per episode, with its summary (turn count, return, success).
- ``turns``: one row per turn, keyed by ``uid = run_key << 40 | turn_id`` (the rowid, so
  ``(run, turn_id)`` is unique without a second index); token arrays are little-endian BLOBs (int32 ids, float32
  logprobs and hidden states), ``info`` is JSON text, ``reward`` is NULL when unscored.
- ``advantages(run_key, turn_id, iteration, estimator, value)``: written by the trainer.
- ``metrics(run_key, iteration, name, value)``: per-iteration scalars.

Connections use WAL mode, ``synchronous=NORMAL`` and a busy timeout so that several processes
(trainer, proxy) can write the file. Durability: every committed transaction survives a crash or
SIGKILL of the writing process (it is in the WAL, which the OS holds); only an OS crash or power
loss can lose the last transactions committed since the last WAL sync (SQLite syncs at each
checkpoint), and never corrupts the file — SQLite's standard WAL trade-off; ``synchronous=FULL``
would add an fsync to every commit. Checkpoints run with SQLite's default
``wal_autocheckpoint`` (1000 pages = 16 MiB at ``PAGE_SIZE``): larger values only defer the
copying (measured: the same turns/s once the final checkpoint is counted).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from agentrl.types import SCHEMA_VERSION

#: Bits of ``turns.uid`` that hold the turn id (``uid = run_key << TURN_BITS | turn_id``).
TURN_BITS = 40

#: SQLite page size of new stores (bytes); rows of ~1.5 KB (300-token prompts) fit several per page.
PAGE_SIZE = 16384

#: Seconds a writer waits for another process's write lock before failing.
BUSY_TIMEOUT_S = 60.0

_DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_key INTEGER PRIMARY KEY, run_id TEXT NOT NULL UNIQUE, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS episodes (
    run_key INTEGER NOT NULL, episode_id INTEGER NOT NULL, group_id INTEGER NOT NULL,
    env_id TEXT NOT NULL, task_id TEXT NOT NULL, seed INTEGER NOT NULL, status TEXT NOT NULL,
    error TEXT NOT NULL, n_turns INTEGER NOT NULL, return_ REAL, success INTEGER NOT NULL,
    created_at REAL NOT NULL, PRIMARY KEY (run_key, episode_id));
CREATE TABLE IF NOT EXISTS turns (
    uid INTEGER PRIMARY KEY, run_key INTEGER NOT NULL, turn_id INTEGER NOT NULL, episode_id INTEGER NOT NULL,
    group_id INTEGER NOT NULL, t INTEGER NOT NULL, parent_turn_id INTEGER,
    policy_version INTEGER NOT NULL, observation TEXT NOT NULL, anchor_obs TEXT NOT NULL,
    next_anchor_obs TEXT NOT NULL, action TEXT NOT NULL, action_valid INTEGER NOT NULL,
    reward REAL, terminated INTEGER NOT NULL, truncated INTEGER NOT NULL,
    prompt_ids BLOB NOT NULL, completion_ids BLOB NOT NULL, completion_logprobs BLOB NOT NULL,
    hidden BLOB, info TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS turns_by_episode ON turns (run_key, episode_id, t);
CREATE TABLE IF NOT EXISTS advantages (
    run_key INTEGER NOT NULL, turn_id INTEGER NOT NULL, iteration INTEGER NOT NULL,
    estimator TEXT NOT NULL, value REAL NOT NULL,
    PRIMARY KEY (run_key, turn_id, iteration, estimator));
CREATE TABLE IF NOT EXISTS metrics (
    run_key INTEGER NOT NULL, iteration INTEGER NOT NULL, name TEXT NOT NULL,
    value REAL NOT NULL, PRIMARY KEY (run_key, iteration, name));
"""


class StoreError(ValueError):
    """The store file or a request to it is unusable; the message names the fix."""


class SchemaVersionError(StoreError):
    """The file was written with another ``SCHEMA_VERSION`` than this agentrl reads."""


class StorePathError(PermissionError):
    """The store path cannot be created or written; the message names the path and the fix."""


def _check_path(path: Path, readonly: bool) -> None:
    if path.is_dir():
        raise StorePathError(f"store path {path} is a directory; pass a file path such as {path / 'turns.sqlite'}")
    if readonly:
        if not path.exists():
            raise FileNotFoundError(
                f"no turn store at {path}; create one with `agentrl rollout ENV_ID --store {path}` "
                f"or check the path"
            )
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorePathError(
            f"cannot create the directory of store path {path} ({exc.strerror}); "
            f"pass --store / store.path in a writable directory"
        ) from exc


def connect(path: str | Path, *, readonly: bool = False) -> sqlite3.Connection:
    """Open (creating if needed) the store file and check its schema version.

    Args:
        path: the SQLite file.
        readonly: open for reading only; the file must exist.
    Returns:
        a connection in autocommit mode (transactions are explicit ``BEGIN IMMEDIATE``).
    Raises:
        StorePathError: the path is a directory or cannot be written.
        FileNotFoundError: ``readonly`` and the file does not exist.
        StoreError: the file is not an agentrl store (e.g. not SQLite).
        SchemaVersionError: the file has another schema version.
    """
    path = Path(path)
    _check_path(path, readonly)
    try:
        if readonly:
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S,
                                   isolation_level=None, check_same_thread=False)
        else:
            conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        if not readonly:
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")  # no effect on an existing file
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            _create(conn, path)
        else:
            _check_version(conn, path)
    except sqlite3.OperationalError as exc:
        if "readonly" in str(exc) or "unable to open" in str(exc):
            raise StorePathError(
                f"cannot write the turn store at {path} ({exc}); pass a path in a writable "
                f"directory (--store / store.path) or fix the file's permissions"
            ) from exc
        raise StoreError(f"cannot open the turn store at {path}: {exc}") from exc
    except sqlite3.DatabaseError as exc:
        raise StoreError(
            f"{path} is not an agentrl turn store ({exc}); pass the path of a store file or a new path"
        ) from exc
    return conn


def _create(conn: sqlite3.Connection, path: Path) -> None:
    """Create the tables of a new store; an existing store is only version-checked (a file
    of another version is never modified)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        has_meta = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone()
        if has_meta or conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            _check_version(conn, path)
        for stmt in _DDL.split(";"):
            if stmt.strip():
                conn.execute(stmt)
        conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _check_version(conn: sqlite3.Connection, path: Path) -> None:
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.OperationalError as exc:
        raise StoreError(
            f"{path} is an SQLite file but not an agentrl turn store (no meta table); pass a store path or a new path"
        ) from exc
    if row is None or row[0] != str(SCHEMA_VERSION):
        found = "none" if row is None else row[0]
        raise SchemaVersionError(
            f"turn store {path} has schema version {found}; this agentrl reads version {SCHEMA_VERSION}. "
            f"Open it with the agentrl release that wrote it (and export it with `export_parquet`), "
            f"or write to a new store path"
        )

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
- ``episode_iterations(run_key, episode_id, iteration)``: the trainer iteration (1-based) that
  stored the episode (``agentrl.store.iterations``: what a resume sets aside).
- ``turn_scores(run_key, turn_id, iteration, name, ndim, value)``: the step scorers' columns the
  estimator read (OPRL's ``prm_logratio``, StepOPSD's ``gap``), one little-endian float64 BLOB per
  turn (a row of a 2-D column without its trailing NaN padding), so the viewer can explain the
  stored advantages (``agentrl.store.scores``). Created by ``CREATE TABLE IF NOT EXISTS`` on every
  writable open like the indexes (a store written before it existed gets it from its next writer;
  readers treat a missing table as no scores), so the schema version is unchanged.
- ``iteration`` is **1-based**, as everywhere in agentrl (console, ``metrics.jsonl``'s ``step``,
  TensorBoard, W&B, ``checkpoints/iter_<k>``): iteration k is the k-th training iteration, its
  rollout sampled with policy version k − 1 and its checkpoint holds the weights after it;
  iteration 0 is "before training" (an evaluation run's metrics). Stores written before
  2026-12-01 numbered the trainer's rows from 0.
- indexes: ``turns_by_episode`` and the viewer's ``VIEW_INDEXES`` (episodes by group, turns by
  policy version, advantages by iteration); ``CREATE INDEX IF NOT EXISTS`` on every writable
  open, so a store written before an index existed gets it from its next writer (the schema
  version is unchanged: indexes hold no data, and readers work without them).

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

import logging
import os
import sqlite3
from pathlib import Path

from agentrl.types import SCHEMA_VERSION

#: Bits of ``turns.uid`` that hold the turn id (``uid = run_key << TURN_BITS | turn_id``).
TURN_BITS = 40

#: SQLite page size of new stores (bytes); rows of ~1.5 KB (300-token prompts) fit several per page.
PAGE_SIZE = 16384

#: Seconds a writer waits for another process's write lock before failing.
BUSY_TIMEOUT_S = 60.0

#: Indexes the viewer's pages use (``agentrl.view``), part of the schema since issue 20 (named
#: ``view_*`` because the viewer used to add them itself). Stores written before lack them: the
#: viewer still reads them (slower on large stores) and a writer's open adds them.
VIEW_INDEXES = ("view_episodes_by_group", "view_turns_by_version", "view_advantages_by_iteration")

def tokenizer_key(run_id: str) -> str:
    """The ``meta`` key under which ``run_id``'s tokenizer path (a model folder or a
    ``tokenizer.json`` that decodes its ids) is recorded."""
    return f"tokenizer:{run_id}"


def recorded_tokenizer(conn: sqlite3.Connection, run_id: str) -> str | None:
    """The tokenizer path recorded for ``run_id`` in the store behind ``conn`` (None: none)."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (tokenizer_key(run_id),)).fetchone()
    return None if row is None else str(row[0])


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
CREATE INDEX IF NOT EXISTS view_episodes_by_group ON episodes (run_key, group_id, episode_id);
CREATE INDEX IF NOT EXISTS view_turns_by_version ON turns (run_key, policy_version, episode_id);
CREATE TABLE IF NOT EXISTS advantages (
    run_key INTEGER NOT NULL, turn_id INTEGER NOT NULL, iteration INTEGER NOT NULL,
    estimator TEXT NOT NULL, value REAL NOT NULL,
    PRIMARY KEY (run_key, turn_id, iteration, estimator));
CREATE TABLE IF NOT EXISTS metrics (
    run_key INTEGER NOT NULL, iteration INTEGER NOT NULL, name TEXT NOT NULL,
    value REAL NOT NULL, PRIMARY KEY (run_key, iteration, name));
CREATE INDEX IF NOT EXISTS view_advantages_by_iteration ON advantages (run_key, iteration, estimator, value);
CREATE TABLE IF NOT EXISTS episode_iterations (
    run_key INTEGER NOT NULL, episode_id INTEGER NOT NULL, iteration INTEGER NOT NULL,
    PRIMARY KEY (run_key, episode_id));
CREATE TABLE IF NOT EXISTS turn_scores (
    run_key INTEGER NOT NULL, turn_id INTEGER NOT NULL, iteration INTEGER NOT NULL, name TEXT NOT NULL,
    ndim INTEGER NOT NULL, value BLOB NOT NULL, PRIMARY KEY (run_key, turn_id, iteration, name));
"""


class StoreError(ValueError):
    """The store file or a request to it is unusable; the message names the fix."""


class SchemaVersionError(StoreError):
    """The file was written with another ``SCHEMA_VERSION`` than this agentrl reads."""


class StoreDamagedError(StoreError):
    """The file is an SQLite file whose pages fail SQLite's integrity check (``quick_check``)."""


class StorePathError(PermissionError):
    """The store path cannot be created or written; the message names the path and the fix."""


_log = logging.getLogger("agentrl.store")
_NOTED: set[Path] = set()  # read-only stores already reported (one log line per path and process)


def _read_only_reason(folder: Path) -> str | None:
    """Why ``folder`` cannot be written (``None``: it can): a read-only file system (found with
    ``statvfs``, so it holds for root too) or missing write permission."""
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return "it is on a read-only file system"
    except OSError:
        return None
    return None if os.access(folder, os.W_OK) else "its directory is not writable by this user"


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
    reason = _read_only_reason(path.parent)
    if reason is not None and path.exists():
        raise StorePathError(
            f"turn store {path} is read-only ({reason}): it can be read (`agentrl replay {path}`, `agentrl view "
            f"{path}`) but not appended to; pass a new --store / store.path in a writable directory, or copy it "
            f"there first with `agentrl store backup {path} NEW.sqlite`"
        )


def damaged_error(path: Path, detail: str, *, writing: bool) -> "StoreDamagedError":
    """The one-line ``StoreDamagedError`` for ``path``, quoting SQLite's first complaint ``detail``."""
    detail = " ".join(str(detail).replace("*** in database main ***", "").split())
    detail = detail if len(detail) <= 160 else detail[:157] + "..."
    return StoreDamagedError(
        f"turn store {path} is damaged (SQLite: {detail}); nothing was {'written' if writing else 'read'}. "
        f"Restore it from a backup (`agentrl store backup` copies a live store), or salvage the readable rows "
        f"into a new file with the sqlite3 shell: `sqlite3 {path} .recover | sqlite3 NEW.sqlite`"
    )


def check_integrity(conn: sqlite3.Connection, path: Path, *, writing: bool) -> None:
    """SQLite's ``PRAGMA quick_check`` (every b-tree page and cell, not index contents):
    about 1 s per million turns (a 256 MiB store; 0.03-0.07 s for 32k turns with 300-token
    prompts, 53 MiB) on a 2-core machine (benchmarks/store_indexes.py).

    Raises:
        StoreDamagedError: the check reports a problem.
    """
    try:
        rows = conn.execute("PRAGMA quick_check(1)").fetchall()
    except sqlite3.DatabaseError as exc:  # e.g. the schema page itself is unreadable
        if "not a database" in str(exc):
            raise
        raise damaged_error(path, str(exc), writing=writing) from exc
    if rows != [("ok",)]:
        raise damaged_error(path, rows[0][0] if rows else "no result", writing=writing)


def _open_read(path: Path) -> sqlite3.Connection:
    """``mode=ro``; on a read-only file system (no ``-shm`` can be created beside the file)
    ``immutable=1`` instead, which is exact when no ``-wal`` file holds newer transactions."""
    uri = path.resolve().as_uri()
    kw = dict(uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
    conn = sqlite3.connect(f"{uri}?mode=ro", **kw)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens the WAL index (-shm)
        return conn
    except sqlite3.OperationalError as exc:
        reason = _read_only_reason(path.parent)
        if "unable to open" not in str(exc) or reason is None:
            conn.close()
            raise
    conn.close()
    wal = path.with_name(path.name + "-wal")
    if wal.exists() and wal.stat().st_size > 0:
        raise StorePathError(
            f"turn store {path} is read-only ({reason}) and its latest transactions sit in {wal.name}, which SQLite "
            f"cannot read there without a {path.name}-shm file; copy {path.name} and {wal.name} to a writable "
            f"directory and open the copy"
        )
    if path not in _NOTED:
        _NOTED.add(path)
        _log.info("turn store %s is read-only (%s): opened it read-only (immutable)", path, reason)
    return sqlite3.connect(f"{uri}?mode=ro&immutable=1", **kw)


def connect(path: str | Path, *, readonly: bool = False, check: bool = True) -> sqlite3.Connection:
    """Open (creating if needed) the store file, check its pages and its schema version.

    Args:
        path: the SQLite file.
        readonly: open for reading only; the file must exist. A store on a read-only file
            system is opened ``immutable`` (and logged once).
        check: run ``check_integrity`` on an existing file (~1 s per million turns); the viewer's
            per-request connections skip it (it checks once at start-up).
    Returns:
        a connection in autocommit mode (transactions are explicit ``BEGIN IMMEDIATE``).
    Raises:
        StorePathError: the path is a directory or cannot be written (e.g. a store on a
            read-only file system opened for writing).
        FileNotFoundError: ``readonly`` and the file does not exist.
        StoreDamagedError: the file fails SQLite's integrity check; nothing is written.
        StoreError: the file is not an agentrl store (e.g. not SQLite).
        SchemaVersionError: the file has another schema version.
    """
    path = Path(path)
    _check_path(path, readonly)
    existed = path.exists() and path.stat().st_size > 0
    try:
        if readonly:
            conn = _open_read(path)
        else:
            conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        if check and existed:
            check_integrity(conn, path, writing=not readonly)
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
        if "malformed" in str(exc):
            raise damaged_error(path, str(exc), writing=not readonly) from exc
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


def missing_indexes(conn: sqlite3.Connection) -> list[str]:
    """The ``VIEW_INDEXES`` the store on ``conn`` lacks (written before they joined the schema)."""
    have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    return [name for name in VIEW_INDEXES if name not in have]


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

"""``TurnStore``: the append-only SQLite turn store (DESIGN.md invariant 4).

One ``BEGIN IMMEDIATE`` transaction per ``add_episodes`` batch: a killed writer loses at
most the uncommitted batch, and several processes (trainer, proxy) may write one file
(WAL mode + busy timeout; ids are assigned under the write lock, so they stay unique).
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
import time
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from agentrl.store import batch as _batch
from agentrl.store.codec import TURN_COLUMNS, row_turn
from agentrl.store.codec import turn_rows as _turn_rows
from agentrl.store.records import AdvantageRecord, EpisodeRecord, MetricRecord
from agentrl.store.schema import TURN_BITS, StoreError, connect, recorded_tokenizer, tokenizer_key
from agentrl.store.iterations import iteration_of, sampled_since, tag_iteration, uncovered_episode_ids
from agentrl.store.scores import insert_scores
from agentrl.store.table import build_table
from agentrl.types import Episode, EpisodeStatus, Turn, TurnTable

_TURN_SELECT = ", ".join(TURN_COLUMNS)
_EPISODE_COLS = "episode_id, group_id, env_id, task_id, seed, status, error, n_turns, return_, success, created_at"
_STATUS = {s.value: s for s in EpisodeStatus}
_INSERT_EPISODE = f"INSERT INTO episodes (run_key, {_EPISODE_COLS}) VALUES ({', '.join('?' * 12)})"
#: Marks the run id a resume splits an interrupted attempt off to: ``<run>.interrupted-<time>``.
INTERRUPTED = ".interrupted-"
#: Marks the run ids evaluation episodes are stored under: ``<run>/eval-<when>`` (``agentrl.eval``).
EVAL_RUN = "/eval-"
#: Seconds a closing writer waits for readers to let its final WAL checkpoint finish.
CLOSE_CHECKPOINT_S = 5.0
_INSERT_TURN = f"INSERT INTO turns (uid, run_key, turn_id, {_TURN_SELECT}) VALUES ({', '.join('?' * 21)})"


def _ids_json(ids: Iterable[int]) -> str:
    return json.dumps([int(i) for i in ids])


class TurnStore:
    """Turns, episodes, advantages and metrics of one or more runs in one SQLite file.

    Args:
        path: the store file; created (with its directory) when missing.
        readonly: open an existing file for reading only (e.g. ``agentrl replay``).
    Raises:
        StorePathError: the path cannot be written (a ``PermissionError``).
        FileNotFoundError: ``readonly`` and no file at ``path``.
        SchemaVersionError: the file has another ``SCHEMA_VERSION``.
        StoreError: the file is not a turn store.
    """

    def __init__(self, path: str | Path, *, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self._conn = connect(self.path, readonly=readonly)
        self._lock = threading.RLock()  # one transaction at a time on this connection (threads)

    # -- lifecycle ---------------------------------------------------------------------
    def close(self) -> None:
        """Close the connection (idempotent). A writer first checkpoints the WAL into the main
        file and empties it (``wal_checkpoint(TRUNCATE)``), so the ``.sqlite`` file alone holds
        every committed turn even while other connections (a viewer) keep the WAL alive; the
        checkpoint waits at most ``CLOSE_CHECKPOINT_S`` for busy readers, then leaves the rest
        in the WAL (nothing is lost; ``agentrl store backup`` copies both)."""
        if self._conn is None:
            return
        with self._lock:
            if not self.readonly:
                try:
                    self._conn.execute(f"PRAGMA busy_timeout = {int(CLOSE_CHECKPOINT_S * 1000)}")
                    self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
                except sqlite3.Error:  # busy or locked: the WAL keeps the rest, as before
                    pass
            self._conn.close()
            self._conn = None

    def __enter__(self) -> "TurnStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"turn store {self.path} is closed; open a new TurnStore")
        return self._conn

    def _write(self):
        if self.readonly:
            raise StoreError(f"turn store {self.path} was opened read-only; open it with readonly=False to write")
        return _Transaction(self._db(), self._lock)

    def _snapshot(self):
        """A read transaction: every query inside sees one committed state of the file."""
        return _Transaction(self._db(), self._lock, begin="BEGIN")

    # -- runs ----------------------------------------------------------------------------
    def set_tokenizer(self, run_id: str, path: str | Path) -> None:
        """Record the tokenizer (a model folder or ``tokenizer.json``) that decodes ``run_id``'s
        token ids, so ``agentrl replay`` and the viewer show text instead of ids."""
        with self._write() as db:
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (tokenizer_key(run_id), str(path)))

    def tokenizer(self, run_id: str) -> str | None:
        """The tokenizer path recorded for ``run_id`` (``set_tokenizer``), or None."""
        return recorded_tokenizer(self._db(), run_id)

    def runs(self) -> list[str]:
        """Run ids in the store, oldest first."""
        return [r[0] for r in self._db().execute("SELECT run_id FROM runs ORDER BY run_key")]

    def max_episode_id(self, run_id: str) -> int | None:
        """The largest episode id stored for ``run_id`` (None: none, or no such run)."""
        if run_id not in self.runs():
            return None
        key, _ = self._run_key(run_id)
        row = self._db().execute("SELECT MAX(episode_id) FROM episodes WHERE run_key = ?", (key,)).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def _run_key(self, run_id: str | None) -> tuple[int, str]:
        """``(run_key, run_id)``; ``None`` picks the only run. Raises ``KeyError`` otherwise."""
        runs = self.runs()
        if run_id is None:
            if len(runs) == 1:
                run_id = runs[0]
            else:
                raise KeyError(
                    f"turn store {self.path} holds {len(runs)} runs ({', '.join(runs) or 'none'}); name one with run_id= / --run"
                )
        row = self._db().execute("SELECT run_key FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            from agentrl.registry import unknown_name_error

            raise unknown_name_error("run", run_id, runs)
        return row[0], run_id

    # -- writing -------------------------------------------------------------------------
    def add_episodes(self, episodes: Sequence[Episode], *, run_id: str | None = None,
                     iteration: int | None = None) -> None:
        """Append a batch of episodes and their turns in one transaction.

        Ids equal to -1 are assigned here (``episode_id``: next free id in the run;
        ``turn_id``: next free id in the run) and written back to the objects after the
        commit, together with ``run_id`` and the parent of each non-first turn whose
        ``parent_turn_id`` was ``None`` (its previous turn).

        Args:
            episodes: the batch; every episode is validated before anything is written.
            run_id: run of every episode (overrides ``Episode.run_id``).
            iteration: the trainer iteration (1-based) storing them, recorded in the same
                transaction (``agentrl.store.iterations``: what a resume sets aside).
        Raises:
            ValueError: invalid input (names the episode and the fix); nothing is written.
            StoreError: an episode or turn id is already stored for the run (append-only).
        """
        plans = _batch.group_by_run(episodes, run_id)
        now = time.time()
        with self._write() as db:
            for plan in plans.values():
                db.execute("INSERT OR IGNORE INTO runs (run_id, created_at) VALUES (?, ?)", (plan.run_id, now))
                key = db.execute("SELECT run_key FROM runs WHERE run_id = ?", (plan.run_id,)).fetchone()[0]
                nxt_e, nxt_t = db.execute(
                    "SELECT (SELECT coalesce(max(episode_id) + 1, 0) FROM episodes WHERE run_key = ?),"
                    " (SELECT coalesce(max(uid) - ? + 1, 0) FROM turns WHERE uid >= ? AND uid < ?)",
                    (key, key << TURN_BITS, key << TURN_BITS, (key + 1) << TURN_BITS)).fetchone()
                _batch.assign_ids(plan, episodes, nxt_e, nxt_t)
                self._insert_plan(db, key, plan, episodes, now)
                if iteration is not None:
                    tag_iteration(db, key, [plan.episode_ids[i] for i in plan.episodes], iteration)
        for plan in plans.values():
            _batch.write_back(plan, episodes)

    def _insert_plan(self, db, key: int, plan, episodes: Sequence[Episode], now: float) -> None:
        ep_rows = []
        for i in plan.episodes:
            ep = episodes[i]
            ep_rows.append((key, plan.episode_ids[i], int(ep.group_id), ep.env_id, ep.task_id, int(ep.seed),
                            EpisodeStatus(ep.status).value, ep.error, len(ep.turns), ep.return_, int(ep.success), now))

        def turn_rows():  # lazily: executemany binds each row and drops it (no list of 100k tuples)
            for i in plan.episodes:
                eid = plan.episode_ids[i]
                try:
                    yield from _turn_rows(episodes[i].turns, key, eid, plan.turn_ids[i], plan.parents[i])
                except ValueError as exc:
                    raise ValueError(f"episode {eid} (run {plan.run_id!r}), {exc}. "
                                     f"Nothing of this batch was written") from exc

        try:
            db.executemany(_INSERT_EPISODE, ep_rows)
            db.executemany(_INSERT_TURN, turn_rows())
        except sqlite3.IntegrityError as exc:
            raise StoreError(
                f"run {plan.run_id!r} in {self.path}: an episode or turn id of this batch is already stored ({exc}); "
                f"the store is append-only: use new ids or -1 to let the store assign them. Nothing was written"
            ) from exc

    def split_off(self, run_id: str, *, to_run_id: str, since_policy_version: int | None = None,
                  after_iteration: int | None = None, from_episode_id: int | None = None) -> list[int]:
        """Move the episodes of ``run_id`` a checkpoint after ``after_iteration`` does not cover
        (stored by a later iteration; untagged ones with id ``>= from_episode_id``:
        ``agentrl.store.iterations``) — or, given ``since_policy_version`` instead, those sampled
        at policy version ``>=`` it — with their turns and advantages to the new run
        ``to_run_id``, in one transaction.

        Used on resume (``agentrl.train``): episodes stored after the last checkpoint were
        sampled by a policy whose update was lost; the resumed run re-plays them under the
        same ids, so the old ones move to a sibling run (nothing is deleted; ``agentrl
        replay --run TO_RUN_ID`` shows them). Turn ids are kept. Turnless episodes (e.g. a
        failed reset) stored with or after the first moved episode move too.

        The iteration rule is the exact one for a resume: under ``rollout.max_staleness`` ≥ 1 an
        interrupted iteration may hold only older versions (the version rule keeps them) and groups
        of a later production (an id rule moves covered ones); the version rule is kept for callers
        without iteration tags.

        Returns:
            the moved episode ids, ascending (empty, and nothing written, when none match or
            ``run_id`` is not in the store).
        Raises:
            StoreError: ``to_run_id`` already exists, or a moved turn's parent stays behind.
            ValueError: not exactly one of ``since_policy_version`` and ``after_iteration``.
        """
        if (since_policy_version is None) == (after_iteration is None):
            raise ValueError("split_off: pass exactly one of since_policy_version and after_iteration")
        row = self._db().execute("SELECT run_key FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            return []
        key = row[0]
        with self._write() as db:
            ids = (uncovered_episode_ids(db, key, after_iteration, from_episode_id) if after_iteration is not None
                   else sampled_since(db, key, since_policy_version))
            if not ids:
                return []
            if db.execute("SELECT 1 FROM runs WHERE run_id = ?", (to_run_id,)).fetchone():
                raise StoreError(f"split_off: run {to_run_id!r} already exists in {self.path}; pick a new run id")
            db.execute("CREATE TEMP TABLE IF NOT EXISTS moving (episode_id INTEGER PRIMARY KEY)")
            db.execute("DELETE FROM moving")
            db.executemany("INSERT INTO moving VALUES (?)", ((i,) for i in ids))
            mine = "run_key = ? AND episode_id IN (SELECT episode_id FROM moving)"
            orphans = db.execute(f"SELECT count(*) FROM turns WHERE {mine} AND parent_turn_id IS NOT NULL AND "
                                 f"parent_turn_id NOT IN (SELECT turn_id FROM turns WHERE {mine})", (key, key)).fetchone()[0]
            if orphans:
                rule = (f"stored after iteration {after_iteration}" if after_iteration is not None else
                        f"at policy version >= {since_policy_version}")
                raise StoreError(f"split_off: {orphans} turn(s) of run {run_id!r} {rule} branch from older turns; "
                                 f"nothing was moved")
            new = db.execute("INSERT INTO runs (run_id, created_at) VALUES (?, ?)", (to_run_id, time.time())).lastrowid
            db.execute(f"UPDATE advantages SET run_key = ? WHERE run_key = ? AND turn_id IN "
                       f"(SELECT turn_id FROM turns WHERE {mine})", (new, key, key))
            db.execute(f"UPDATE turns SET run_key = ?, uid = uid + ? WHERE {mine}", (new, (new - key) << TURN_BITS, key))
            db.execute(f"UPDATE episodes SET run_key = ? WHERE {mine}", (new, key))
            db.execute(f"UPDATE episode_iterations SET run_key = ? WHERE {mine}", (new, key))
        return ids

    def set_advantages(self, run_id: str, turn_ids: Sequence[int], values: Sequence[float], iteration: int,
                       estimator: str, *, overwrite: bool = False) -> None:
        """Store one advantage per turn, keyed by ``(run, turn_id, iteration, estimator)``.

        Args:
            turn_ids: int[N], stored turns of ``run_id`` (e.g. ``TurnTable.turn_id``).
            values: float[N], finite advantages.
            overwrite: replace values already stored under the same key.
        Raises:
            ValueError: length mismatch, non-finite value, unknown turn id, or (without
                ``overwrite``) a key already stored. Nothing is written then.
        """
        ids = np.asarray(turn_ids, dtype=np.int64).reshape(-1)
        vals = np.asarray(values, dtype=np.float64).reshape(-1)
        if ids.shape != vals.shape:
            raise ValueError(f"set_advantages: {ids.size} turn ids but {vals.size} values; pass one value per turn")
        if ids.size and (ids.min() < 0 or ids.max() >= 1 << TURN_BITS):
            raise ValueError(f"set_advantages: turn ids must be stored ids in [0, 2**{TURN_BITS}), got {ids.min()}..{ids.max()}")
        if not np.isfinite(vals).all():
            raise ValueError(f"set_advantages: {int((~np.isfinite(vals)).sum())} non-finite advantage(s); fix the estimator input")
        key, run_id = self._run_key(run_id)
        with self._write() as db:
            known = db.execute("SELECT count(*) FROM turns WHERE uid IN (SELECT ? + value FROM json_each(?))",
                               (key << TURN_BITS, _ids_json(np.unique(ids)))).fetchone()[0]
            if known != np.unique(ids).size:
                raise ValueError(f"set_advantages: {np.unique(ids).size - known} turn id(s) are not stored for run {run_id!r}")
            verb = "INSERT OR REPLACE" if overwrite else "INSERT"
            try:
                db.executemany(f"{verb} INTO advantages VALUES (?, ?, ?, ?, ?)",
                               ((key, int(t), int(iteration), estimator, float(v)) for t, v in zip(ids, vals)))
            except sqlite3.IntegrityError as exc:
                raise ValueError(f"advantages of run {run_id!r} iteration {iteration} estimator {estimator!r} are "
                                 f"already stored; pass overwrite=True to replace them") from exc

    def set_scores(self, run_id: str, turn_ids: Sequence[int], scores: Mapping[str, np.ndarray], iteration: int) -> None:
        """Keep the step scorers' columns (``TurnTable.scores``: float64[N] or [N, L]) of ``turn_ids``
        at ``iteration`` beside their advantages (``agentrl.store.scores``; replaces the same key).
        Raises ValueError for a column of another leading length."""
        key, _ = self._run_key(run_id)
        with self._write() as db:
            insert_scores(db, key, np.asarray(turn_ids, dtype=np.int64).reshape(-1), scores, iteration)

    def add_metrics(self, run_id: str, iteration: int, values: Mapping[str, float]) -> None:
        """Store per-iteration scalars (replacing the same ``(iteration, name)``). Non-finite
        values (NaN, ±inf: e.g. a metric undefined this iteration) are not stored; the JSONL
        log keeps them as null."""
        values = {k: float(v) for k, v in values.items() if math.isfinite(float(v))}
        with self._write() as db:
            db.execute("INSERT OR IGNORE INTO runs (run_id, created_at) VALUES (?, ?)", (run_id, time.time()))
            key = db.execute("SELECT run_key FROM runs WHERE run_id = ?", (run_id,)).fetchone()[0]
            db.executemany("INSERT OR REPLACE INTO metrics VALUES (?, ?, ?, ?)",
                           ((key, int(iteration), str(k), v) for k, v in values.items()))

    # -- reading -------------------------------------------------------------------------
    def episodes(self, run_id: str | None = None, episode_ids: Sequence[int] | None = None) -> list[EpisodeRecord]:
        """Episode summaries of one run, by episode id. ``run_id=None``: the only run."""
        key, run_id = self._run_key(run_id)
        sql, params = f"SELECT {_EPISODE_COLS} FROM episodes WHERE run_key = ?", [key]
        if episode_ids is not None:
            sql += " AND episode_id IN (SELECT value FROM json_each(?))"
            params.append(_ids_json(episode_ids))
        rows = self._db().execute(sql + " ORDER BY episode_id", params)
        return [EpisodeRecord(run_id, r[0], r[1], r[2], r[3], r[4], _STATUS.get(r[5]) or EpisodeStatus(r[5]),
                              r[6], r[7], r[8], bool(r[9]), r[10]) for r in rows]

    def turns(self, episode_id: int, run_id: str | None = None) -> list[Turn]:
        """Every field of the turns of one episode, in ``t`` order."""
        key, run_id = self._run_key(run_id)
        rows = self._db().execute(f"SELECT turn_id, {_TURN_SELECT} FROM turns WHERE run_key = ? AND episode_id = ? "
                                  "ORDER BY t", (key, int(episode_id)))
        return [row_turn(run_id, r[0], r[1:]) for r in rows]

    def load_episodes(self, run_id: str | None = None, episode_ids: Sequence[int] | None = None) -> list[Episode]:
        """Full episodes (every turn field) of one run, read from one snapshot."""
        with self._snapshot():
            return [Episode(episode_id=r.episode_id, group_id=r.group_id, env_id=r.env_id, task_id=r.task_id,
                            seed=r.seed, status=r.status, turns=self.turns(r.episode_id, r.run_id), error=r.error,
                            run_id=r.run_id)
                    for r in self.episodes(run_id, episode_ids)]

    def table(self, run_id: str | None = None, episode_ids: Sequence[int] | None = None) -> TurnTable:
        """The estimators' ``TurnTable`` over the episodes of one run (rows by episode, then t).

        Equal to ``TurnTable.from_episodes(self.load_episodes(run_id, episode_ids))`` (one
        anchor vocabulary; ``parent`` from ``parent_turn_id``; ``episode_ok`` from status and
        scored rewards; ``trainable``: rows with completion tokens), built from the columns
        (``store.table.build_table``); prompt ids and observations are not loaded.
        """
        with self._snapshot():  # episodes and turns from one snapshot, even with a writer running
            recs = self.episodes(run_id, episode_ids)
            if not recs:
                return TurnTable.from_episodes([])
            key, _ = self._run_key(recs[0].run_id)
            if episode_ids is None:
                return build_table(self._db(), key, recs)
            return build_table(self._db(), key, recs, "AND episode_id IN (SELECT value FROM json_each(?))",
                               (_ids_json(episode_ids),))

    def advantages(self, run_id: str | None = None, *, iteration: int | None = None,
                   estimator: str | None = None) -> list[AdvantageRecord]:
        """Stored advantages of one run, ordered by (iteration, estimator, turn_id)."""
        key, run_id = self._run_key(run_id)
        sql, params = "SELECT turn_id, iteration, estimator, value FROM advantages WHERE run_key = ?", [key]
        if iteration is not None:
            sql, params = sql + " AND iteration = ?", params + [int(iteration)]
        if estimator is not None:
            sql, params = sql + " AND estimator = ?", params + [estimator]
        rows = self._db().execute(sql + " ORDER BY iteration, estimator, turn_id", params)
        return [AdvantageRecord(run_id, *r) for r in rows]

    def episode_iterations(self, run_id: str | None = None) -> dict[int, int]:
        """Episode id -> the 1-based trainer iteration that stored it (tagged ones only: not eval episodes)."""
        return iteration_of(self._db(), self._run_key(run_id)[0])

    def metrics(self, run_id: str | None = None) -> list[MetricRecord]:
        """Stored metrics of one run, ordered by (iteration, name)."""
        key, run_id = self._run_key(run_id)
        rows = self._db().execute("SELECT iteration, name, value FROM metrics WHERE run_key = ? ORDER BY iteration, name",
                                  (key,))
        return [MetricRecord(run_id, *r) for r in rows]


class _Transaction:
    """``BEGIN IMMEDIATE`` (or ``begin``) … ``COMMIT`` (``ROLLBACK`` on any exception)."""

    def __init__(self, conn: sqlite3.Connection, lock: threading.RLock, begin: str = "BEGIN IMMEDIATE") -> None:
        self.conn, self.lock, self.begin = conn, lock, begin

    def __enter__(self) -> sqlite3.Connection:
        self.lock.acquire()
        try:
            self.conn.execute(self.begin)
        except BaseException:
            self.lock.release()
            raise
        return self.conn

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.conn.execute("COMMIT" if exc_type is None else "ROLLBACK")
        finally:
            self.lock.release()

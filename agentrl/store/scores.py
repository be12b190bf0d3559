"""The step scorers' columns of a batch, kept with its advantages (``turn_scores``; DESIGN.md's
turn store): what the trainer's estimator read beside the stored turns, so ``agentrl view`` can
rerun the estimator's breakdown on a stored group (OPRL's ``prm_logratio``, StepOPSD's ``gap``).

A column is float64[N] or float64[N, L] (``TurnTable.scores``); each turn's row is one
little-endian float64 BLOB (a 2-D row without its trailing NaN padding) under
``(run, turn_id, iteration, name)``.
"""

from __future__ import annotations

import sqlite3
from typing import Mapping, Sequence

import numpy as np

__all__ = ["insert_scores", "read_scores"]


def _row_blob(row: np.ndarray) -> bytes:
    row = np.asarray(row, dtype="<f8").reshape(-1)
    keep = np.flatnonzero(~np.isnan(row))
    return row[: keep[-1] + 1 if keep.size else 0].tobytes()


def insert_scores(db: sqlite3.Connection, run_key: int, turn_ids: np.ndarray, scores: Mapping[str, np.ndarray],
                  iteration: int) -> int:
    """Insert (or replace) every column of ``scores`` for ``turn_ids`` (int64[N]) at ``iteration``
    inside the caller's write transaction ``db``; returns the rows written.

    Raises:
        ValueError: a column whose leading dimension is not N, or with more than 2 dimensions.
    """
    n = len(turn_ids)
    rows = []
    for name, col in scores.items():
        arr = np.asarray(col, dtype=np.float64)
        if arr.ndim not in (1, 2) or arr.shape[0] != n:
            raise ValueError(f"turn_scores: column {name!r} has shape {arr.shape}; expected (N,) or (N, L) with N={n}")
        for tid, row in zip(turn_ids.tolist(), arr):
            rows.append((run_key, int(tid), int(iteration), str(name), arr.ndim, _row_blob(row)))
    db.executemany("INSERT OR REPLACE INTO turn_scores VALUES (?, ?, ?, ?, ?, ?)", rows)
    return len(rows)


def read_scores(conn: sqlite3.Connection, run_key: int, turn_ids: Sequence[int], iteration: int,
                names: Sequence[str]) -> dict[str, np.ndarray]:
    """``{name: column}`` of ``names`` for ``turn_ids`` (in that order) at ``iteration``: float64[N]
    or float64[N, L] NaN-padded, as written. A name missing for any of the turns (or a store
    without the table: written before it existed) is left out of the result."""
    ids = [int(t) for t in turn_ids]
    out: dict[str, np.ndarray] = {}
    for name in names:
        try:
            got = conn.execute("SELECT turn_id, ndim, value FROM turn_scores WHERE run_key = ? AND iteration = ? AND "
                               "name = ?", (run_key, int(iteration), str(name))).fetchall()
        except sqlite3.OperationalError:  # no turn_scores table in a store written before it existed
            return {}
        rows = {int(t): (int(d), np.frombuffer(v, dtype="<f8")) for t, d, v in got}
        if any(t not in rows for t in ids) or not ids:
            continue
        if rows[ids[0]][0] == 1:
            out[name] = np.array([rows[t][1][0] if rows[t][1].size else np.nan for t in ids])
        else:
            width = max([1] + [rows[t][1].size for t in ids])
            col = np.full((len(ids), width), np.nan)
            for i, t in enumerate(ids):
                col[i, : rows[t][1].size] = rows[t][1]
            out[name] = col
    return out

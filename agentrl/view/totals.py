"""Run totals (episode, group, turn, failure and success counts) kept up to date cheaply.

Totals over a 1M-turn run take a scan of its episodes (~0.25 s). The store is append-only
(DESIGN invariant 4) and assigns episode ids in increasing order, so ``RunTotals`` keeps the
totals of the episodes up to the last id it saw and adds only the episodes written since.
A cheap count check catches episodes written with explicit lower ids (then it recomputes).
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass

from agentrl.view.db import Page, execute, keyset_page


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One run: episode / group / turn counts, failed episodes, success rate (0..1) over ok
    episodes (``None`` without any), and the number of iterations with metrics."""

    run_key: int
    run_id: str
    created_at: float
    n_episodes: int
    n_groups: int
    n_turns: int
    n_failed: int
    success_rate: float | None
    n_iterations: int


@dataclass(frozen=True, slots=True)
class _Totals:
    last_episode: int
    n_episodes: int
    n_groups: int
    n_turns: int
    n_failed: int
    n_ok: int
    n_ok_success: int


_AGG = ("SELECT count(*), coalesce(sum(n_turns), 0), coalesce(sum(status != 'ok'), 0), "
        "coalesce(sum(status = 'ok'), 0), coalesce(sum(status = 'ok' AND success), 0), max(episode_id), {groups} "
        "FROM episodes e WHERE e.run_key = ? AND e.episode_id > ?")
# groups of the new episodes that no older episode belongs to (index probe per new episode)
_NEW_GROUPS = ("count(DISTINCT CASE WHEN NOT EXISTS (SELECT 1 FROM episodes o INDEXED BY view_episodes_by_group "
               "WHERE o.run_key = e.run_key AND o.group_id = e.group_id AND o.episode_id <= ?) THEN e.group_id END)")


class RunTotals:
    """Per-run totals cache shared by the requests of one viewer (thread-safe)."""

    def __init__(self) -> None:
        self._cache: dict[int, _Totals] = {}
        self._lock = threading.Lock()

    def get(self, conn: sqlite3.Connection, key: int) -> _Totals:
        """Totals of run ``key`` as of ``conn``'s snapshot."""
        with self._lock:
            old = self._cache.get(key)
        n_now = conn.execute("SELECT count(*) FROM episodes WHERE run_key = ?", (key,)).fetchone()[0]
        if old is not None and old.n_episodes == n_now:
            return old
        if old is None:
            row = execute(conn, _AGG.format(groups="count(DISTINCT e.group_id)"), (key, -1))[0]
            new = _Totals(-1 if row[5] is None else row[5], row[0], row[6], *row[1:5])
        else:
            row = execute(conn, _AGG.format(groups=_NEW_GROUPS), (old.last_episode, key, old.last_episode))[0]
            new = _Totals(old.last_episode if row[5] is None else row[5], old.n_episodes + row[0], old.n_groups + row[6],
                          *(a + b for a, b in zip((old.n_turns, old.n_failed, old.n_ok, old.n_ok_success), row[1:5])))
            if new.n_episodes != n_now:  # an episode with an id below the last one seen: recompute
                with self._lock:
                    self._cache.pop(key, None)
                return self.get(conn, key)
        with self._lock:
            self._cache[key] = new
        return new

    def summaries(self, conn: sqlite3.Connection, *, after: int | None = None, before: int | None = None,
                  limit: int = 50) -> Page[RunSummary]:
        """A page of runs (keyed by ``run_key``, oldest first) with their totals."""
        sql = ("SELECT r.run_key, r.run_id, r.created_at, (SELECT count(DISTINCT m.iteration) FROM metrics m "
               "WHERE m.run_key = r.run_key) FROM runs r WHERE 1 {cond} ORDER BY r.run_key {order} LIMIT ?")

        def fetch(op: str, params: list, n: int):
            return conn.execute(sql.format(cond=f"AND r.run_key {op}" if op else "",
                                           order="DESC" if op.startswith("<") else ""), params + [n]).fetchall()

        page = keyset_page(fetch, lambda r: r[0], after=after, before=before, limit=limit)
        out = []
        for key, run_id, created, n_it in page.items:
            t = self.get(conn, key)
            out.append(RunSummary(key, run_id, created, t.n_episodes, t.n_groups, t.n_turns, t.n_failed,
                                  t.n_ok_success / t.n_ok if t.n_ok else None, n_it))
        return Page(out, page.next_after, page.prev_before)

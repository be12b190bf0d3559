"""Run-, iteration-, group- and episode-level queries of the viewer (one read connection each).

Every list is a keyset page (``db.keyset_page``) over an indexed key, so a page costs the
same on the first and the last page of a 1M-turn store. Rows are frozen dataclasses.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, fields
from urllib.parse import urlencode

from agentrl.store.schema import TURN_BITS
from agentrl.view.db import Page, execute, keyset_page


@dataclass(frozen=True, slots=True)
class Filters:
    """Episode filters shared by the run, iteration and group pages (``None`` = any).

    Attributes:
        env, task: exact ``env_id`` / ``task_id``.
        success: episodes that won (True) or did not (False).
        estimator: episodes with advantages from this estimator (also picks the colour).
        iteration: episodes with advantages written at this trainer iteration.
        policy_version: episodes with a turn sampled by this policy version.
    """

    env: str | None = None
    task: str | None = None
    success: bool | None = None
    estimator: str | None = None
    iteration: int | None = None
    policy_version: int | None = None

    def sql(self, key: int) -> tuple[str, list]:
        """``(condition, params)`` on ``episodes e`` of run ``key`` (``"1"`` when no filter)."""
        cond, params = [], []
        for col, val in (("e.env_id", self.env), ("e.task_id", self.task)):
            if val is not None:
                cond.append(f"{col} = ?")
                params.append(val)
        if self.success is not None:
            cond.append("e.success = ?")
            params.append(int(self.success))
        if self.policy_version is not None:  # IN (uncorrelated subquery): evaluated once per query
            cond.append("e.episode_id IN (SELECT t.episode_id FROM turns t INDEXED BY view_turns_by_version "
                        "WHERE t.run_key = ? AND t.policy_version = ?)")
            params += [key, self.policy_version]
        if self.iteration is not None:
            est = " AND a.estimator = ?" if self.estimator is not None else ""
            cond.append(f"e.episode_id IN (SELECT t.episode_id FROM advantages a INDEXED BY view_advantages_by_iteration "
                        f"JOIN turns t ON t.uid = (a.run_key << {TURN_BITS}) | a.turn_id "
                        f"WHERE a.run_key = ? AND a.iteration = ?{est})")
            params += [key, self.iteration] + ([self.estimator] if est else [])
        elif self.estimator is not None:
            cond.append("EXISTS (SELECT 1 FROM turns t JOIN advantages a ON a.run_key = t.run_key AND a.turn_id = t.turn_id "
                        "WHERE t.run_key = e.run_key AND t.episode_id = e.episode_id AND a.estimator = ?)")
            params.append(self.estimator)
        return (" AND ".join(cond) or "1"), params

    def query(self, **extra: object) -> str:
        """URL query string of the set filters plus ``extra`` (``None`` values dropped)."""
        items = {f.name: getattr(self, f.name) for f in fields(self)} | extra
        return urlencode({k: (int(v) if isinstance(v, bool) else v) for k, v in items.items() if v is not None})


@dataclass(frozen=True, slots=True)
class GroupRow:
    """One group of a run: its episodes' env/task, counts, success count and mean return of ok episodes."""

    group_id: int
    env_id: str
    task_id: str
    n_episodes: int
    n_success: int
    mean_return: float | None
    n_turns: int
    n_failed: int


@dataclass(frozen=True, slots=True)
class EpisodeRow:
    """One episode summary (the ``episodes`` row)."""

    episode_id: int
    group_id: int
    env_id: str
    task_id: str
    seed: int
    status: str
    error: str
    n_turns: int
    return_: float | None
    success: bool


def metric_series(conn: sqlite3.Connection, key: int) -> dict[str, tuple[list[int], list[float]]]:
    """``name → (iterations, values)`` of every metric of the run, iterations ascending."""
    out: dict[str, tuple[list[int], list[float]]] = {}
    for it, name, value in conn.execute(
            "SELECT iteration, name, value FROM metrics WHERE run_key = ? ORDER BY name, iteration", (key,)):
        xs, ys = out.setdefault(name, ([], []))
        xs.append(int(it))
        ys.append(float(value))
    return out


def advantage_keys(conn: sqlite3.Connection, key: int) -> list[tuple[int, str]]:
    """Distinct ``(iteration, estimator)`` pairs with stored advantages, ascending.

    A loose index scan (one indexed probe per pair), so its cost does not grow with the
    number of advantages; one full scan when the viewer's index is missing.
    """
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'view_advantages_by_iteration'"
                        ).fetchone():  # no index (read-only store): one scan beats a probe per pair
        return [(int(i), e) for i, e in conn.execute(
            "SELECT DISTINCT iteration, estimator FROM advantages WHERE run_key = ? ORDER BY iteration, estimator", (key,))]
    out: list[tuple[int, str]] = []
    it = execute(conn, "SELECT min(iteration) FROM advantages INDEXED BY view_advantages_by_iteration "
                       "WHERE run_key = ?", (key,))[0][0]
    while it is not None:
        est = execute(conn, "SELECT min(estimator) FROM advantages INDEXED BY view_advantages_by_iteration "
                            "WHERE run_key = ? AND iteration = ?", (key, it))[0][0]
        while est is not None:
            out.append((int(it), est))
            est = execute(conn, "SELECT min(estimator) FROM advantages INDEXED BY view_advantages_by_iteration "
                                "WHERE run_key = ? AND iteration = ? AND estimator > ?", (key, it, est))[0][0]
        it = execute(conn, "SELECT min(iteration) FROM advantages INDEXED BY view_advantages_by_iteration "
                           "WHERE run_key = ? AND iteration > ?", (key, it))[0][0]
    return out


@dataclass(frozen=True, slots=True)
class AdvantageStats:
    """Statistics of the advantages of one ``(iteration, estimator)``: count, mean, std, min, max."""

    iteration: int
    estimator: str
    n: int
    mean: float
    std: float
    min: float
    max: float


def advantage_stats(conn: sqlite3.Connection, key: int, iteration: int) -> list[AdvantageStats]:
    """Per-estimator statistics of the advantages written at ``iteration`` (population std)."""
    rows = execute(conn, "SELECT estimator, count(*), avg(value), avg(value * value), min(value), max(value) FROM advantages "
                         "INDEXED BY view_advantages_by_iteration WHERE run_key = ? AND iteration = ? "
                         "GROUP BY estimator ORDER BY estimator", (key, iteration))
    return [AdvantageStats(iteration, est, n, mean, max(sq - mean * mean, 0.0) ** 0.5, lo, hi)
            for est, n, mean, sq, lo, hi in rows]


def groups(conn: sqlite3.Connection, key: int, filters: Filters, *, after: int | None = None,
           before: int | None = None, limit: int = 50) -> Page[GroupRow]:
    """A page of the run's groups with at least one episode matching ``filters``."""
    if _no_such_estimator(conn, key, filters):
        return Page([], None, None)
    cond, params = filters.sql(key)
    sql = ("SELECT e.group_id, min(e.env_id), min(e.task_id), count(*), sum(e.success), "
           "avg(CASE WHEN e.status = 'ok' THEN e.return_ END), sum(e.n_turns), sum(e.status != 'ok') "
           "FROM episodes e INDEXED BY view_episodes_by_group WHERE e.run_key = ? AND {cond} {op} "
           "GROUP BY e.group_id ORDER BY e.group_id {order} LIMIT ?")

    def fetch(op: str, extra: list, n: int):
        q = sql.format(cond=cond, op=f"AND e.group_id {op}" if op else "", order="DESC" if op.startswith("<") else "")
        return [GroupRow(*r) for r in execute(conn, q, [key, *params, *extra, n])]

    return keyset_page(fetch, lambda g: g.group_id, after=after, before=before, limit=limit)


def episodes(conn: sqlite3.Connection, key: int, filters: Filters, *, group_id: int | None = None,
             after: int | None = None, before: int | None = None, limit: int = 50) -> Page[EpisodeRow]:
    """A page of the run's episodes matching ``filters`` (of one group when ``group_id`` is set)."""
    if _no_such_estimator(conn, key, filters):
        return Page([], None, None)
    cond, params = filters.sql(key)
    if group_id is not None:
        cond, params = f"e.group_id = ? AND {cond}", [group_id, *params]
    sql = ("SELECT e.episode_id, e.group_id, e.env_id, e.task_id, e.seed, e.status, e.error, e.n_turns, e.return_, "
           "e.success FROM episodes e WHERE e.run_key = ? AND {cond} {op} ORDER BY e.episode_id {order} LIMIT ?")

    def fetch(op: str, extra: list, n: int):
        q = sql.format(cond=cond, op=f"AND e.episode_id {op}" if op else "", order="DESC" if op.startswith("<") else "")
        return [EpisodeRow(*r[:9], bool(r[9])) for r in execute(conn, q, [key, *params, *extra, n])]

    return keyset_page(fetch, lambda e: e.episode_id, after=after, before=before, limit=limit)


def episode(conn: sqlite3.Connection, key: int, episode_id: int) -> EpisodeRow:
    """One episode summary. Raises ``KeyError`` when the run has no such episode."""
    page = episodes(conn, key, Filters(), after=episode_id - 1, limit=1)
    if not page.items or page.items[0].episode_id != episode_id:
        raise KeyError(f"episode {episode_id} is not in this run; open the run page to list its episodes")
    return page.items[0]



def _no_such_estimator(conn: sqlite3.Connection, key: int, filters: Filters) -> bool:
    """True when ``filters.estimator`` wrote no advantage in the run: answered by the loose
    index scan instead of probing every episode."""
    return filters.estimator is not None and filters.estimator not in {e for _, e in advantage_keys(conn, key)}

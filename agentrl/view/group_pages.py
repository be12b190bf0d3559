"""Page models of a group: its episodes with their advantages (sortable) and its siblings side by side.

A group is small next to a run (its episodes are played from one task and compared with each
other), so its pages load the whole group (at most ``GROUP_EPISODE_CAP`` episodes, and
``turns.GROUP_TURN_CAP`` turns, both said when cut) and sort and page it in memory.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from agentrl.view import queries as q
from agentrl.view import turns as tq
from agentrl.view.db import Page, run_key
from agentrl.view.explain import GroupExplanation, TurnExplanation, explain_group
from agentrl.view.tokens import advantage_colour
from agentrl.view.tree import Branch, build_forest, is_branched

#: Episodes of one group loaded by the group page.
GROUP_EPISODE_CAP = 2000
#: Sort keys of the group page (``?sort=``).
SORTS = ("episode", "advantage", "return", "turns", "success")
#: Episode columns per page of the sibling view.
SIBLING_COLUMNS = 8


@dataclass(frozen=True, slots=True)
class EpisodeAdvantage:
    """An episode of the group with its advantages under the page's estimator: mean over its
    turns with one (``None``: none), the first turn's, min and max, and how many turns have one."""

    episode: q.EpisodeRow
    mean: float | None
    first: float | None
    low: float | None
    high: float | None
    n: int
    colour: str


@dataclass(frozen=True, slots=True)
class GroupPage:
    """One group: a sorted page of its episodes with advantages and, when branched, its tree."""

    run_id: str
    group_id: int
    rows: list[EpisodeAdvantage]
    page: int
    pages: int
    n_episodes: int
    episodes_cut: bool
    sort: str
    desc: bool
    estimator: str | None
    iteration: int | None
    forest: list[Branch] | None
    cut: bool
    filters: q.Filters


def advantage_choice(conn: sqlite3.Connection, key: int, group_id: int, estimator: str | None,
                     iteration: int | None) -> tuple[str | None, int | None]:
    """``(estimator, iteration)`` shown for a group: the given ones, else the latest iteration
    with an advantage on the group's turns and its first estimator by name (``None``: none)."""
    cond, params = "", []
    if estimator is not None:
        cond, params = " AND a.estimator = ?", [estimator]
    if iteration is not None:
        cond, params = cond + " AND a.iteration = ?", params + [iteration]
    row = conn.execute("SELECT a.iteration, a.estimator FROM turns t JOIN advantages a ON a.run_key = t.run_key AND "
                       "a.turn_id = t.turn_id WHERE t.run_key = ? AND t.episode_id IN (SELECT episode_id FROM episodes "
                       f"WHERE run_key = ? AND group_id = ?){cond} ORDER BY a.iteration DESC, a.estimator LIMIT 1",
                       (key, key, group_id, *params)).fetchone()
    if row is None:
        return estimator, iteration
    return row[1], int(row[0])


def group_advantages(conn: sqlite3.Connection, key: int, group_id: int, estimator: str | None,
                     iteration: int | None) -> dict[int, dict[int, tuple[int, float]]]:
    """``episode_id → {t: (turn_id, advantage)}`` of ``estimator`` at ``iteration`` on the group's turns."""
    out: dict[int, dict[int, tuple[int, float]]] = {}
    if estimator is None or iteration is None:
        return out
    for eid, t, tid, value in conn.execute(
            "SELECT t.episode_id, t.t, t.turn_id, a.value FROM turns t JOIN advantages a ON a.run_key = t.run_key AND "
            "a.turn_id = t.turn_id WHERE t.run_key = ? AND t.episode_id IN (SELECT episode_id FROM episodes WHERE "
            "run_key = ? AND group_id = ?) AND a.estimator = ? AND a.iteration = ?",
            (key, key, group_id, estimator, iteration)):
        out.setdefault(int(eid), {})[int(t)] = (int(tid), float(value))
    return out


def _sort_key(sort: str):
    def key(r: EpisodeAdvantage):
        e = r.episode
        v = {"episode": e.episode_id, "advantage": r.mean, "return": e.return_, "turns": e.n_turns,
             "success": int(e.success)}[sort]
        return (v is None, v if v is not None else 0.0, e.episode_id)  # no value: last
    return key


def group_page(conn: sqlite3.Connection, run_id: str, group_id: int, filters: q.Filters, *, sort: str, desc: bool,
               page: int, page_size: int) -> GroupPage:
    """The page of one group: its episodes matching ``filters``, sorted by ``sort`` (``SORTS``),
    page ``page`` (1-based; past the end shows the last)."""
    key = run_key(conn, run_id)
    eps = q.episodes(conn, key, filters, group_id=group_id, limit=GROUP_EPISODE_CAP)
    est, it = advantage_choice(conn, key, group_id, filters.estimator, filters.iteration)
    advs = group_advantages(conn, key, group_id, est, it)
    values = [v for per in advs.values() for _, v in per.values()]
    scale = max((abs(v) for v in values), default=0.0)
    rows = []
    for e in eps.items:
        per = advs.get(e.episode_id, {})
        vs = [v for _, (_, v) in sorted(per.items())]
        mean = sum(vs) / len(vs) if vs else None
        rows.append(EpisodeAdvantage(e, mean, per[min(per)][1] if per else None, min(vs, default=None),
                                     max(vs, default=None), len(vs), advantage_colour(mean, scale)))
    by = _sort_key(sort)
    has = sorted((r for r in rows if not by(r)[0]), key=by, reverse=desc)
    ordered = has + sorted((r for r in rows if by(r)[0]), key=by)  # rows without a value last, either way
    pages = max(1, -(-len(ordered) // page_size))
    page = min(page, pages)
    turns, cut = tq.group_turns(conn, key, group_id)
    return GroupPage(run_id, group_id, ordered[(page - 1) * page_size: page * page_size], page, pages, len(rows),
                     eps.next_after is not None, sort, desc, est, it,
                     build_forest(turns) if is_branched(turns) else None, cut, filters)


@dataclass(frozen=True, slots=True)
class SiblingCell:
    """One turn in the sibling grid: the turn, its advantage (``None``: none), colour, breakdown."""

    turn: tq.GroupTurn
    advantage: float | None
    colour: str
    why: TurnExplanation | None


@dataclass(frozen=True, slots=True)
class SiblingsPage:
    """Episodes of one group side by side: ``columns`` (episodes) × ``rows`` (t = 0..T−1)."""

    run_id: str
    group_id: int
    columns: list[q.EpisodeRow]
    rows: list[list[SiblingCell | None]]
    episodes: Page[q.EpisodeRow]
    estimator: str | None
    iteration: int | None
    scale: float
    explanation: GroupExplanation
    cut: bool


def siblings_page(conn: sqlite3.Connection, store: Path, run_id: str, group_id: int, filters: q.Filters, *,
                  after: int | None, before: int | None, columns: int = SIBLING_COLUMNS) -> SiblingsPage:
    """The sibling view of a group: a page of ``columns`` episodes, one column each, turns by ``t``;
    each cell shows the action, reward, advantage and the estimator's breakdown of it."""
    key = run_key(conn, run_id)
    eps = q.episodes(conn, key, filters, group_id=group_id, after=after, before=before, limit=columns)
    est, it = advantage_choice(conn, key, group_id, filters.estimator, filters.iteration)
    advs = group_advantages(conn, key, group_id, est, it)
    turns, cut = tq.group_turns(conn, key, group_id)
    shown = {e.episode_id for e in eps.items}
    by_ep: dict[int, dict[int, tq.GroupTurn]] = {}
    for g in turns:
        if g.episode_id in shown:
            by_ep.setdefault(g.episode_id, {})[g.t] = g
    stored = {tid: v for e in shown for tid, v in advs.get(e, {}).values()}
    expl = explain_group(conn, store, run_id, key, group_id, est, stored)
    scale = max((abs(v) for v in stored.values()), default=0.0)
    depth = max((t + 1 for per in by_ep.values() for t in per), default=0)
    grid = []
    for t in range(depth):
        line: list[SiblingCell | None] = []
        for e in eps.items:
            g = by_ep.get(e.episode_id, {}).get(t)
            if g is None:
                line.append(None)
                continue
            a = advs.get(e.episode_id, {}).get(t)
            value = None if a is None else a[1]
            line.append(SiblingCell(g, value, advantage_colour(value, scale), expl.turns.get(g.turn_id)))
        grid.append(line)
    return SiblingsPage(run_id, group_id, eps.items, grid, eps, est, it, scale, expl, cut)

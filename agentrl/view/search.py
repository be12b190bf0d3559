"""Text search over a run's turns: observation and/or action substrings, paged.

One request scans at most ``SCAN_TURNS`` turns of the run (a ``turns.uid`` range: the
primary key, so no index is added) and returns at most ``limit`` hits; the page links to the
next scan window, so a search over 1M turns costs a few fixed-size requests, never one
unbounded scan. Matching is SQLite ``LIKE`` (case-insensitive for ASCII; ``%`` and ``_`` in
the text match literally).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from agentrl.view.db import uid

#: Turns one search request looks at (its cost bound, ~0.1–0.3 s per 100k turns).
SCAN_TURNS = 100_000
#: Where ``?in=`` may look.
FIELDS = ("both", "observation", "action")
#: Characters of context shown around the first match.
SNIPPET = 80


@dataclass(frozen=True, slots=True)
class Hit:
    """One matching turn: ids, ``t``, the field that matched and a snippet around the match."""

    turn_id: int
    episode_id: int
    group_id: int
    t: int
    field: str
    before: str
    match: str
    after: str
    action: str


@dataclass(frozen=True, slots=True)
class SearchResult:
    """A page of hits and where to go on.

    Attributes:
        hits: at most ``limit`` hits, by turn id.
        next_after: the turn id to continue after (``None``: the run's last turn was reached).
        scanned_to: the last turn id this request looked at (``None``: none).
        full: the page is full (more hits may follow ``next_after``).
    """

    hits: list[Hit]
    next_after: int | None
    scanned_to: int | None
    full: bool


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _snippet(hay: str, needle: str, field: str, row) -> Hit:
    i = hay.lower().find(needle.lower())
    i = max(i, 0)
    j = i + len(needle)
    return Hit(row[0], row[1], row[2], row[3], field, ("…" if i > SNIPPET else "") + hay[max(0, i - SNIPPET):i],
               hay[i:j], hay[j:j + SNIPPET] + ("…" if len(hay) > j + SNIPPET else ""), row[5])


def search_turns(conn: sqlite3.Connection, key: int, text: str, *, where: str = "both", after: int = -1,
                 limit: int = 50, scan: int = SCAN_TURNS) -> SearchResult:
    """Turns of run ``key`` with ``turn_id > after`` (at most ``scan`` of them) whose observation
    and/or action contains ``text``.

    Raises:
        ValueError: empty ``text``, ``where`` not in ``FIELDS``, ``limit`` or ``scan`` < 1.
    """
    if not text:
        raise ValueError("search text is empty; pass ?q=TEXT")
    if where not in FIELDS:
        raise ValueError(f"in={where!r} must be one of {', '.join(FIELDS)}")
    if limit < 1 or scan < 1:
        raise ValueError("limit and scan must be ≥ 1")
    pat = f"%{_escape(text)}%"
    cond = {"both": "(observation LIKE ? ESCAPE '\\' OR action LIKE ? ESCAPE '\\')",
            "observation": "observation LIKE ? ESCAPE '\\'", "action": "action LIKE ? ESCAPE '\\'"}[where]
    pats = [pat, pat] if where == "both" else [pat]
    lo = uid(key, after + 1) if after >= 0 else uid(key, 0)
    end = conn.execute("SELECT uid FROM turns WHERE uid >= ? AND uid < ? ORDER BY uid LIMIT 1 OFFSET ?",
                       (lo, uid(key + 1, 0), scan - 1)).fetchone()
    hi = end[0] if end else uid(key + 1, 0) - 1
    rows = conn.execute(f"SELECT turn_id, episode_id, group_id, t, observation, action FROM turns "
                        f"WHERE uid >= ? AND uid <= ? AND {cond} ORDER BY uid LIMIT ?", (lo, hi, *pats, limit + 1)
                        ).fetchall()
    full = len(rows) > limit
    rows = rows[:limit]
    hits = []
    for r in rows:
        if where != "action" and text.lower() in r[4].lower():
            hits.append(_snippet(r[4], text, "observation", r))
        else:
            hits.append(_snippet(r[5], text, "action", r))
    if full:
        return SearchResult(hits, rows[-1][0], rows[-1][0], True)
    last = conn.execute("SELECT max(turn_id) FROM turns WHERE uid >= ? AND uid <= ?", (lo, hi)).fetchone()[0]
    more = last is not None and conn.execute("SELECT 1 FROM turns WHERE uid > ? AND uid < ? LIMIT 1",
                                             (uid(key, last), uid(key + 1, 0))).fetchone() is not None
    return SearchResult(hits, last if more else None, last, False)

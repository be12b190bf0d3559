"""Turn-level queries of the viewer: an episode's turns, their advantages and their group.

Indexed access only: turns of an episode by ``turns_by_episode`` (run, episode, t), the
group's turns by its episodes (``view_episodes_by_group``, then ``turns_by_episode``; no
turns-by-group index, which would cost every ingest), advantages by their primary key
(run, turn_id, ...).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass

import numpy as np

from agentrl.store.codec import from_f32, from_i32
from agentrl.view.db import Page, execute, keyset_page

#: Turns of one group loaded for its tree and anchor groups; larger groups are cut (and say so).
GROUP_TURN_CAP = 5000


@dataclass(frozen=True, slots=True)
class AdvantageValue:
    """One stored advantage of a turn (dimensionless) at a trainer iteration, by estimator."""

    iteration: int
    estimator: str
    value: float


@dataclass(frozen=True, slots=True)
class JudgeRecord:
    """A judge's verdict on the episode (``info["judge"]`` of its last turn, ``agentrl.rollout.judge``):
    ``score`` in [0, 1] (None: the judge failed, ``error`` says why), the judge's ``reply``,
    ``latency_s`` (seconds; 0 for a cache hit), ``attempts``, ``cached``, the ``endpoint`` and the
    ``prompt`` it was shown."""

    score: float | None
    reply: str
    error: str
    latency_s: float
    attempts: int
    cached: bool
    endpoint: str
    prompt: str

    @classmethod
    def of(cls, info: dict) -> "JudgeRecord | None":
        j = info.get("judge")
        if not isinstance(j, dict):
            return None
        return cls(j.get("score"), str(j.get("reply", "")), str(j.get("error", "")), float(j.get("latency_s") or 0.0),
                   int(j.get("attempts") or 0), bool(j.get("cached")), str(j.get("endpoint", "")),
                   str(j.get("prompt", "")))


@dataclass(frozen=True, slots=True)
class TurnRow:
    """Every stored field of one turn, decoded.

    Attributes:
        prompt_ids: int32[P]; completion_ids: int32[C]; completion_logprobs: float32[C].
        info: the turn's ``info`` as indented JSON text.
        segment: ``info["segment"]`` (prompt segment of a chat context; ``None`` without one).
        new_segment: the segment differs from the previous turn's (the chat template rewrote
            history and the prompt was rebuilt: a fork).
        judge: the judge's verdict on the episode (on its last turn), else None.
        tool_errors: the tool-call parse problems of the reply (``info["tool_call_errors"]``:
            markup not parsed, arguments against their schema), () when none.
    """

    turn_id: int
    episode_id: int
    group_id: int
    t: int
    parent_turn_id: int | None
    policy_version: int
    observation: str
    anchor_obs: str
    action: str
    action_valid: bool
    reward: float | None
    terminated: bool
    truncated: bool
    prompt_ids: np.ndarray
    completion_ids: np.ndarray
    completion_logprobs: np.ndarray
    info: str
    segment: int | None
    new_segment: bool
    judge: JudgeRecord | None = None
    tool_errors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupTurn:
    """The few fields of a group's turn needed for trees and anchor groups."""

    turn_id: int
    episode_id: int
    t: int
    parent_turn_id: int | None
    action: str
    action_valid: bool
    reward: float | None
    anchor_obs: str


_TURN_COLS = ("turn_id, episode_id, group_id, t, parent_turn_id, policy_version, observation, anchor_obs, action, "
              "action_valid, reward, terminated, truncated, prompt_ids, completion_ids, completion_logprobs, info")


def _segment(info: dict) -> int | None:
    seg = info.get("segment")
    return int(seg) if isinstance(seg, (int, float)) and not isinstance(seg, bool) else None


def episode_turns(conn: sqlite3.Connection, key: int, episode_id: int, *, after: int | None = None,
                  before: int | None = None, limit: int = 20) -> Page[TurnRow]:
    """A page of an episode's turns in ``t`` order (keyset on ``t``)."""
    sql = (f"SELECT {_TURN_COLS} FROM turns WHERE run_key = ? AND episode_id = ? {{op}} ORDER BY t {{order}} LIMIT ?")

    def fetch(op: str, extra: list, n: int):
        q = sql.format(op=f"AND t {op}" if op else "", order="DESC" if op.startswith("<") else "")
        return conn.execute(q, [key, episode_id, *extra, n]).fetchall()

    page = keyset_page(fetch, lambda r: r[3], after=after, before=before, limit=limit)
    prev_seg = None
    if page.items and page.items[0][3] > 0:
        row = conn.execute("SELECT info FROM turns WHERE run_key = ? AND episode_id = ? AND t < ? ORDER BY t DESC LIMIT 1",
                           (key, episode_id, page.items[0][3])).fetchone()
        prev_seg = _segment(json.loads(row[0])) if row else None
    out = []
    for k, r in enumerate(page.items):
        info = json.loads(r[16])
        seg = _segment(info)
        new = seg is not None and prev_seg is not None and seg != prev_seg
        out.append(TurnRow(*r[:9], bool(r[9]), r[10], bool(r[11]), bool(r[12]), from_i32(r[13]), from_i32(r[14]),
                           from_f32(r[15]), json.dumps(info, indent=1, sort_keys=True), seg, new,
                           JudgeRecord.of(info), tuple(str(e) for e in info.get("tool_call_errors") or ())))
        prev_seg = seg
    return Page(out, page.next_after, page.prev_before)


def turn_advantages(conn: sqlite3.Connection, key: int, turn_ids: list[int]) -> dict[int, list[AdvantageValue]]:
    """``turn_id → advantages`` (ordered by iteration, estimator) of the given turns."""
    out: dict[int, list[AdvantageValue]] = {int(t): [] for t in turn_ids}
    rows = conn.execute("SELECT turn_id, iteration, estimator, value FROM advantages WHERE run_key = ? AND turn_id IN "
                        "(SELECT value FROM json_each(?)) ORDER BY turn_id, iteration, estimator",
                        (key, json.dumps([int(t) for t in turn_ids])))
    for tid, it, est, val in rows:
        out[int(tid)].append(AdvantageValue(int(it), est, float(val)))
    return out


def default_estimator(advantages: dict[int, list[AdvantageValue]]) -> str | None:
    """The estimator of the latest iteration among ``advantages`` (ties: first by name)."""
    pairs = [(a.iteration, a.estimator) for values in advantages.values() for a in values]
    if not pairs:
        return None
    last = max(it for it, _ in pairs)
    return min(est for it, est in pairs if it == last)


def pick(values: list[AdvantageValue], estimator: str | None, iteration: int | None) -> AdvantageValue | None:
    """The advantage of ``estimator`` at ``iteration`` (its latest when ``None``), or ``None``."""
    found = None
    for a in values:
        if a.estimator == estimator and (iteration is None or a.iteration == iteration):
            found = a  # values are by iteration: the last match is the latest
    return found


def group_turns(conn: sqlite3.Connection, key: int, group_id: int, cap: int = GROUP_TURN_CAP) -> tuple[list[GroupTurn], bool]:
    """The group's turns (by episode, t), at most ``cap``; the flag says whether it was cut."""
    rows = execute(conn, "SELECT turn_id, episode_id, t, parent_turn_id, action, action_valid, reward, anchor_obs "
                         "FROM turns INDEXED BY turns_by_episode WHERE run_key = ? AND episode_id IN "
                         "(SELECT episode_id FROM episodes INDEXED BY view_episodes_by_group "
                         "WHERE run_key = ? AND group_id = ?) LIMIT ?", (key, key, group_id, cap + 1))
    turns = sorted((GroupTurn(r[0], r[1], r[2], r[3], r[4], bool(r[5]), r[6], r[7]) for r in rows[:cap]),
                   key=lambda g: (g.episode_id, g.t))
    return turns, len(rows) > cap


def anchor_peers(turns: list[GroupTurn], anchor_obs: str, turn_id: int) -> list[GroupTurn]:
    """The other turns of the group whose ``anchor_obs`` equals ``anchor_obs`` exactly
    (the anchor state group of GiGPO-style estimators, ALGORITHMS.md §0.4)."""
    return [g for g in turns if g.anchor_obs == anchor_obs and g.turn_id != turn_id]

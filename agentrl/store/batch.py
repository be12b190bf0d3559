"""Validation and id assignment for one ``add_episodes`` batch (no I/O).

The whole batch is checked before anything is written, so bad input never leaves a partial
batch in the store. Ids are *planned* here and written back to the ``Episode``/``Turn``
objects only after the transaction commits.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Sequence

from agentrl.store.schema import TURN_BITS
from agentrl.types import Episode, EpisodeStatus

_MAX_TURN_ID = 1 << TURN_BITS


@dataclass
class RunPlan:
    """Ids planned for the episodes of one run in a batch.

    Attributes:
        run_id: the run.
        episodes: indices (into the batch) of the run's episodes.
        episode_ids: planned id per batch index (filled by ``assign_ids``).
        turn_ids: planned ids per batch index, one list per episode, in turn order.
        parents: planned parent turn id per turn (``None`` for a root turn).
    """

    run_id: str
    episodes: list[int] = field(default_factory=list)
    episode_ids: dict[int, int] = field(default_factory=dict)
    turn_ids: dict[int, list[int]] = field(default_factory=dict)
    parents: dict[int, list[int | None]] = field(default_factory=dict)


def group_by_run(episodes: Sequence[Episode], run_id: str | None) -> dict[str, RunPlan]:
    """Check every episode and turn of the batch and group the episodes by run id.

    Args:
        episodes: the batch.
        run_id: run id for every episode (overrides ``Episode.run_id``), or ``None`` to use
            each episode's own.
    Raises:
        ValueError: an empty run id, a turn of another run/episode/group, turns out of ``t``
            order, an unknown status, or a turn id used twice in the batch.
    """
    plans: dict[str, RunPlan] = {}
    for i, ep in enumerate(episodes):
        rid = run_id if run_id is not None else ep.run_id
        if not rid:
            raise ValueError(f"{_where(ep, i)} has no run_id; set Episode.run_id or pass run_id= to add_episodes")
        try:
            EpisodeStatus(ep.status)
        except ValueError:
            raise ValueError(f"{_where(ep, i)}: unknown status {ep.status!r}; use an EpisodeStatus") from None
        _check_turns(ep, i, rid)
        plan = plans.get(rid)
        if plan is None:
            plan = plans[rid] = RunPlan(rid)
        plan.episodes.append(i)
    for plan in plans.values():
        ids = [tr.turn_id for i in plan.episodes for tr in episodes[i].turns if tr.turn_id >= 0]
        if len(ids) != len(set(ids)):
            raise ValueError(f"run {plan.run_id!r}: a turn id appears twice in this batch; turn ids are unique per run")
        eids = [episodes[i].episode_id for i in plan.episodes if episodes[i].episode_id >= 0]
        if len(eids) != len(set(eids)):
            raise ValueError(f"run {plan.run_id!r}: an episode id appears twice in this batch")
    return plans


def _where(ep: Episode, i: int) -> str:
    return f"episode {ep.episode_id} (batch position {i})"


_CHECKED = operator.attrgetter("run_id", "episode_id", "group_id", "t")


def _check_turns(ep: Episode, i: int, run_id: str) -> None:
    last_t = None
    eid, gid = ep.episode_id, ep.group_id
    for rid, tr_eid, tr_gid, t in map(_CHECKED, ep.turns):
        if rid != run_id and rid != "":
            raise ValueError(f"{_where(ep, i)}: turn t={t} has run_id {rid!r}, the episode {run_id!r}")
        if tr_eid != eid and eid >= 0:
            raise ValueError(f"{_where(ep, i)}: turn t={t} has episode_id {tr_eid}; set it to the episode's id")
        if tr_gid != gid:
            raise ValueError(f"{_where(ep, i)}: turn t={t} has group_id {tr_gid}, the episode {gid}")
        if last_t is not None and t <= last_t:
            raise ValueError(f"{_where(ep, i)}: turns are not in increasing t order (t={t} after t={last_t})")
        last_t = t


def assign_ids(plan: RunPlan, episodes: Sequence[Episode], next_episode: int, next_turn: int) -> None:
    """Fill ``plan`` with episode ids, turn ids and parents (Python ints).

    Episodes/turns with id -1 get ``next_episode``/``next_turn`` onwards (above every id
    given explicitly in the batch). A turn whose ``parent_turn_id`` is ``None`` and that is
    not its episode's first turn gets the previous turn as parent (the linear-episode rule
    of ``Turn.parent_turn_id``).

    Raises:
        ValueError: a turn id (given or assigned) is not below ``2**TURN_BITS``.
    """
    explicit_e = [episodes[i].episode_id for i in plan.episodes if episodes[i].episode_id >= 0]
    explicit_t = [tr.turn_id for i in plan.episodes for tr in episodes[i].turns if tr.turn_id >= 0]
    next_episode = max(next_episode, max(explicit_e, default=-1) + 1)
    next_turn = max(next_turn, max(explicit_t, default=-1) + 1)
    if next_turn + sum(len(episodes[i].turns) for i in plan.episodes) - len(explicit_t) > _MAX_TURN_ID:
        raise ValueError(f"run {plan.run_id!r}: a turn id would reach 2**{TURN_BITS} (largest given or stored: "
                         f"{next_turn - 1}); use -1 to let the store assign ids")
    for i in plan.episodes:
        ep = episodes[i]
        if ep.episode_id >= 0:
            plan.episode_ids[i] = int(ep.episode_id)
        else:
            plan.episode_ids[i] = next_episode
            next_episode += 1
        tids: list[int] = []
        parents: list[int | None] = []
        prev = None
        for tr in ep.turns:
            tid = tr.turn_id
            if tid >= 0:
                tid = int(tid)
            else:
                tid = next_turn
                next_turn += 1
            parent = tr.parent_turn_id
            parents.append(prev if parent is None else int(parent))
            tids.append(tid)
            prev = tid
        plan.turn_ids[i] = tids
        plan.parents[i] = parents


def write_back(plan: RunPlan, episodes: Sequence[Episode]) -> None:
    """Copy the planned ids into the ``Episode``/``Turn`` objects (after commit)."""
    for i in plan.episodes:
        ep = episodes[i]
        ep.run_id = plan.run_id
        ep.episode_id = plan.episode_ids[i]
        for tr, tid, parent in zip(ep.turns, plan.turn_ids[i], plan.parents[i]):
            tr.run_id, tr.episode_id, tr.turn_id, tr.parent_turn_id = plan.run_id, ep.episode_id, tid, parent

"""Validation and id assignment for one ``add_episodes`` batch (no I/O).

The whole batch is checked before anything is written, so bad input never leaves a partial
batch in the store. Ids are *planned* here and written back to the ``Episode``/``Turn``
objects only after the transaction commits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from agentrl.types import Episode, EpisodeStatus


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
        where = f"episode {ep.episode_id} (batch position {i})"
        if not rid:
            raise ValueError(f"{where} has no run_id; set Episode.run_id or pass run_id= to add_episodes")
        try:
            EpisodeStatus(ep.status)
        except ValueError:
            raise ValueError(f"{where}: unknown status {ep.status!r}; use an EpisodeStatus") from None
        _check_turns(ep, rid, where)
        plans.setdefault(rid, RunPlan(rid)).episodes.append(i)
    for plan in plans.values():
        ids = [tr.turn_id for i in plan.episodes for tr in episodes[i].turns if tr.turn_id >= 0]
        if len(ids) != len(set(ids)):
            raise ValueError(f"run {plan.run_id!r}: a turn id appears twice in this batch; turn ids are unique per run")
        eids = [episodes[i].episode_id for i in plan.episodes if episodes[i].episode_id >= 0]
        if len(eids) != len(set(eids)):
            raise ValueError(f"run {plan.run_id!r}: an episode id appears twice in this batch")
    return plans


def _check_turns(ep: Episode, run_id: str, where: str) -> None:
    last_t = None
    for tr in ep.turns:
        if tr.run_id not in ("", run_id):
            raise ValueError(f"{where}: turn t={tr.t} has run_id {tr.run_id!r}, the episode {run_id!r}")
        if ep.episode_id >= 0 and tr.episode_id != ep.episode_id:
            raise ValueError(f"{where}: turn t={tr.t} has episode_id {tr.episode_id}; set it to the episode's id")
        if tr.group_id != ep.group_id:
            raise ValueError(f"{where}: turn t={tr.t} has group_id {tr.group_id}, the episode {ep.group_id}")
        if last_t is not None and tr.t <= last_t:
            raise ValueError(f"{where}: turns are not in increasing t order (t={tr.t} after t={last_t})")
        last_t = tr.t


def assign_ids(plan: RunPlan, episodes: Sequence[Episode], next_episode: int, next_turn: int) -> None:
    """Fill ``plan`` with episode ids, turn ids and parents.

    Episodes/turns with id -1 get ``next_episode``/``next_turn`` onwards (above every id
    given explicitly in the batch). A turn whose ``parent_turn_id`` is ``None`` and that is
    not its episode's first turn gets the previous turn as parent (the linear-episode rule
    of ``Turn.parent_turn_id``).
    """
    explicit_e = [episodes[i].episode_id for i in plan.episodes if episodes[i].episode_id >= 0]
    explicit_t = [tr.turn_id for i in plan.episodes for tr in episodes[i].turns if tr.turn_id >= 0]
    next_episode = max([next_episode, *(e + 1 for e in explicit_e)])
    next_turn = max([next_turn, *(t + 1 for t in explicit_t)])
    for i in plan.episodes:
        ep = episodes[i]
        if ep.episode_id >= 0:
            plan.episode_ids[i] = ep.episode_id
        else:
            plan.episode_ids[i] = next_episode
            next_episode += 1
        tids: list[int] = []
        parents: list[int | None] = []
        for k, tr in enumerate(ep.turns):
            if tr.turn_id >= 0:
                tids.append(tr.turn_id)
            else:
                tids.append(next_turn)
                next_turn += 1
            if tr.parent_turn_id is None and k > 0:
                parents.append(tids[k - 1])
            else:
                parents.append(tr.parent_turn_id)
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

"""Which trainer iteration stored each episode (``episode_iterations``; DESIGN.md's turn store), so a
resume sets aside exactly what its checkpoint does not cover.

Under asynchronous rollouts (``rollout.max_staleness`` ≥ 1) an iteration trains the lowest
complete groups the engine workers have finished, which may belong to a later production — so
neither an episode's id nor the policy version that sampled it says which iteration stored it.
``agentrl train`` tags every episode it stores with its (1-based) iteration, in the same
transaction as the episode (``TurnStore.add_episodes(..., iteration=k)``); on resume from a
checkpoint after iteration ``c`` the episodes tagged ``> c`` move aside. Untagged episodes (a
store written before the tag existed) fall back to the id rule: ids from the first id of
iteration ``c`` on.
"""

from __future__ import annotations

import sqlite3
from typing import Sequence

__all__ = ["tag_iteration", "uncovered_episode_ids", "sampled_since", "iteration_of"]


def tag_iteration(db: sqlite3.Connection, run_key: int, episode_ids: Sequence[int], iteration: int) -> None:
    """Record, inside the caller's write transaction ``db``, that ``iteration`` stored ``episode_ids``."""
    db.executemany("INSERT OR REPLACE INTO episode_iterations (run_key, episode_id, iteration) VALUES (?, ?, ?)",
                   ((run_key, int(e), int(iteration)) for e in episode_ids))


def uncovered_episode_ids(db: sqlite3.Connection, run_key: int, after_iteration: int,
                          from_episode_id: int | None) -> list[int]:
    """Episode ids of the run a checkpoint after ``after_iteration`` does not cover: tagged with a
    later iteration, or untagged with an id ``>= from_episode_id`` (None: untagged ones stay)."""
    tagged = [r[0] for r in db.execute(
        "SELECT episode_id FROM episode_iterations WHERE run_key = ? AND iteration > ?", (run_key, int(after_iteration)))]
    untagged = [] if from_episode_id is None else [r[0] for r in db.execute(
        "SELECT episode_id FROM episodes WHERE run_key = ? AND episode_id >= ? AND episode_id NOT IN "
        "(SELECT episode_id FROM episode_iterations WHERE run_key = ?)", (run_key, int(from_episode_id), run_key))]
    return sorted(set(tagged) | set(untagged))


def sampled_since(db: sqlite3.Connection, run_key: int, policy_version: int) -> list[int]:
    """The older rule: episodes stored with or after the first one holding a turn sampled at
    ``policy_version`` or later (turnless ones stored after it too), ascending."""
    since = db.execute("SELECT min(created_at) FROM episodes WHERE run_key = ? AND episode_id IN "
                       "(SELECT episode_id FROM turns WHERE run_key = ? AND policy_version >= ?)",
                       (run_key, run_key, int(policy_version))).fetchone()[0]
    return [] if since is None else [r[0] for r in db.execute(
        "SELECT episode_id FROM episodes WHERE run_key = ? AND created_at >= ? ORDER BY episode_id", (run_key, since))]


def iteration_of(db: sqlite3.Connection, run_key: int) -> dict[int, int]:
    """episode id -> the (1-based) trainer iteration that stored it, for the run's tagged episodes."""
    return dict(db.execute("SELECT episode_id, iteration FROM episode_iterations WHERE run_key = ?", (run_key,)))

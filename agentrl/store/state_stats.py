"""3SPO's per-state success statistics over a run's earlier iterations: a store-side query
(ALGORITHMS.md §16.2–16.3, decision D-16).

State outside the batch. 3SPO scores a turn with how often its state (exact anchor text, over
all task groups of the run) was visited by the run's *earlier* episodes and how many of those
succeeded. agentrl keeps no counter file for this: the counts are read from the run's own store
each iteration, so they are a pure function of the stored turns of iterations < k:

- an *earlier episode* of iteration k is an episode of the run with a turn whose advantage the
  trainer stored at an iteration < k (``TurnStore.set_advantages``, 1-based iterations);
- only ok episodes count (status ok, every reward scored; PITFALLS P5); an episode succeeded
  when the env reward of its final turn (largest ``t``) is > 0 (§16.3);
- N(s) = earlier ok episodes with a turn whose *current* anchor is s (once per episode, however
  often it looped there), N_s(s) = those that succeeded; next-state-only anchors (a terminal
  observation) are never counted; t = 1 + earlier ok episodes.

Resume-safe: a resume moves the interrupted iterations' episodes with their advantages to a
sibling run (``TurnStore.split_off``), so a resumed run reads the same statistics at iteration k
as an uninterrupted one. Reset on ``--no-resume``: a fresh start moves the whole run folder
(store included) aside, so its statistics begin empty. Evaluation episodes live under other run
ids and never count. Cost: one aggregate over the run's stored turns per call (indexed by
episode); it grows with the run.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from agentrl.store.schema import TURN_BITS
from agentrl.store.sqlite import TurnStore
from agentrl.types import TurnTable

_EARLIER_OK = f"""
WITH earlier(episode_id) AS (
    SELECT DISTINCT tu.episode_id FROM advantages a JOIN turns tu ON tu.uid = (a.run_key << {TURN_BITS}) + a.turn_id
    WHERE a.run_key = :k AND a.iteration < :it),
ok(episode_id, won) AS (
    SELECT e.episode_id, coalesce((SELECT f.reward FROM turns f WHERE f.run_key = :k AND f.episode_id = e.episode_id
                                   ORDER BY f.t DESC LIMIT 1), 0.0) > 0
    FROM episodes e JOIN earlier USING (episode_id)
    WHERE e.run_key = :k AND e.status = 'ok' AND NOT EXISTS (
        SELECT 1 FROM turns u WHERE u.run_key = :k AND u.episode_id = e.episode_id AND u.reward IS NULL))
"""

_COUNTS = _EARLIER_OK + """,
visits(anchor_obs, episode_id, won) AS (
    SELECT DISTINCT tu.anchor_obs, tu.episode_id, ok.won FROM turns tu JOIN ok USING (episode_id)
    WHERE tu.run_key = :k AND tu.anchor_obs IN (SELECT value FROM json_each(:anchors)))
SELECT anchor_obs, count(*), sum(won) FROM visits GROUP BY anchor_obs
"""


@dataclass(frozen=True)
class StateStats:
    """Prior success statistics of some states (anchor texts) at one iteration.

    Attributes:
        anchors: the states asked for, M strings.
        n_total: int64[M] earlier ok episodes that visited each state (as a current state).
        n_success: int64[M] those of them that succeeded.
        episodes: earlier ok episodes of the run (all states).
    """

    anchors: tuple[str, ...]
    n_total: np.ndarray
    n_success: np.ndarray
    episodes: int

    @property
    def t(self) -> int:
        """3SPO's counter t = 1 + earlier ok episodes (≥ 1)."""
        return self.episodes + 1

    def of(self, anchor: str) -> tuple[int, int]:
        """(N, N_s) of one of the ``anchors``; KeyError for another string."""
        if anchor not in self.anchors:
            raise KeyError(f"state {anchor!r} was not asked for")
        i = self.anchors.index(anchor)
        return int(self.n_total[i]), int(self.n_success[i])


def query_state_stats(conn: sqlite3.Connection, run_key: int, before_iteration: int,
                      anchors: Sequence[str]) -> StateStats:
    """``state_success_stats`` on an open store connection (e.g. the viewer's) and a run key;
    the caller chooses the transaction (``TurnStore`` runs it in one read snapshot)."""
    anchors = tuple(anchors)
    params = {"k": int(run_key), "it": int(before_iteration), "anchors": json.dumps(list(dict.fromkeys(anchors)))}
    episodes = conn.execute(_EARLIER_OK + "SELECT count(*) FROM ok", params).fetchone()[0]
    counts = {row[0]: (row[1], row[2] or 0) for row in conn.execute(_COUNTS, params)}
    n_total = np.array([counts.get(a, (0, 0))[0] for a in anchors], dtype=np.int64)
    n_success = np.array([counts.get(a, (0, 0))[1] for a in anchors], dtype=np.int64)
    return StateStats(anchors, n_total, n_success, int(episodes))


def state_success_stats(store: TurnStore, run_id: str, before_iteration: int, anchors: Sequence[str]) -> StateStats:
    """Per-state success statistics of ``run_id``'s episodes of iterations < ``before_iteration``.

    Args:
        store: the run's turn store.
        run_id: the run (its earlier iterations' advantages are stored under it).
        before_iteration: k, 1-based: episodes whose advantages were stored at iterations
            1..k−1 count (k = 1: none).
        anchors: M anchor texts (exact equality, §0.4).
    Returns:
        ``StateStats`` (zeros and t = 1 when the run is not in the store yet), read from one
        snapshot of the store.
    """
    if run_id not in store.runs():
        zeros = np.zeros(len(tuple(anchors)), dtype=np.int64)
        return StateStats(tuple(anchors), zeros, zeros.copy(), 0)
    key, _ = store._run_key(run_id)
    with store._snapshot() as db:  # one committed state for both queries
        return query_state_stats(db, key, before_iteration, anchors)


def state_stats_column(table: TurnTable, stats: StateStats) -> np.ndarray:
    """int64[N, 5] ``TurnTable.state_stats`` of ``table`` from ``stats`` asked for
    ``table.anchor_vocab``: per row (N, N_s) of its anchor and of its next anchor, and t.

    Raises:
        ValueError: a key of ``anchor_key`` / ``next_anchor_key`` outside ``anchor_vocab``, or
            ``stats`` asked for other anchors.
    """
    n = len(table)
    if stats.anchors != tuple(table.anchor_vocab):
        raise ValueError("state_stats_column: the statistics were not asked for the table's anchor_vocab")
    if n and max(int(table.anchor_key.max()), int(table.next_anchor_key.max())) >= len(table.anchor_vocab):
        raise ValueError("state_stats_column: the table's anchor keys are not all in anchor_vocab; build it with "
                         "TurnStore.table or TurnTable.from_episodes")
    if not n:
        return np.zeros((0, 5), np.int64)
    return np.stack([stats.n_total[table.anchor_key], stats.n_success[table.anchor_key],
                     stats.n_total[table.next_anchor_key], stats.n_success[table.next_anchor_key],
                     np.full(n, stats.t, dtype=np.int64)], axis=1)


def with_state_stats(store: TurnStore, run_id: str, table: TurnTable, iteration: int) -> TurnTable:
    """``table`` with its ``state_stats`` column (int64[N, 5], ``STATE_STATS_FIELDS``) filled from
    ``state_success_stats(store, run_id, iteration, table.anchor_vocab)`` (``state_stats_column``).
    ``iteration`` is the 1-based iteration the table is scored in (its own episodes do not count yet).

    Raises:
        ValueError: as ``state_stats_column``.
    """
    stats = state_success_stats(store, run_id, iteration, table.anchor_vocab)
    return dataclasses.replace(table, state_stats=state_stats_column(table, stats))

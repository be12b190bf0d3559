"""BEACON's ``milestone`` / ``n_milestones`` columns (ALGORITHMS.md §15.2): the store's columnar
``table()`` reads them from ``Turn.info`` exactly as ``TurnTable.from_episodes`` does."""

from __future__ import annotations


import numpy as np

from agentrl.store import TurnStore
from table_asserts import assert_tables_equal

from agentrl.types import Episode, Turn, TurnTable


def _turn(t: int, info: dict) -> Turn:
    return Turn(run_id="", episode_id=-1, group_id=0, t=t, observation="o", anchor_obs=f"s{t}", action="a",
                action_valid=True, reward=float(t == 2), prompt_ids=np.arange(3, dtype=np.int32),
                completion_ids=np.arange(2, dtype=np.int32), completion_logprobs=np.zeros(2, np.float32), info=info)


def test_table_reads_milestones_like_from_episodes(tmp_path):
    with_ms = Episode(-1, 0, "agentrl/Junction-v0", "t", 0, turns=[
        _turn(0, {"milestone": False, "n_milestones": 2}), _turn(1, {"milestone": True, "n_milestones": 2}),
        _turn(2, {"milestone": True, "n_milestones": 2, "won": True})])
    without = Episode(-1, 0, "agentrl/Junction-v0", "t", 0, turns=[_turn(0, {}), _turn(1, {"won": False})])
    with TurnStore(tmp_path / "s.sqlite") as store:
        store.add_episodes([with_ms, without], run_id="r")
        table = store.table("r")
        assert_tables_equal(table, TurnTable.from_episodes(store.load_episodes("r")))
        assert table.milestone.tolist() == [False, True, True, False, False]
        assert table.n_milestones.tolist() == [2, 2, 2, -1, -1]
        only = store.table("r", episode_ids=[with_ms.episode_id + 1])
        assert_tables_equal(only, TurnTable.from_episodes(store.load_episodes("r", [with_ms.episode_id + 1])))
        assert only.milestone.tolist() == [False, False] and only.n_milestones is None

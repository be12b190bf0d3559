"""The step scorers' columns kept beside the advantages (``TurnStore.set_scores``,
``agentrl.store.scores``): 1-D and NaN-padded 2-D columns round-trip exactly, per iteration; a
column of another length is refused and nothing is written; a store without the table reads none."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from agentrl.store import TurnStore
from agentrl.store.scores import read_scores
from agentrl.types import Episode, Turn


def _store(path) -> TurnStore:
    store = TurnStore(path)
    turns = [Turn(run_id="r", episode_id=0, group_id=0, t=t, observation="o", anchor_obs="a", action="x",
                  action_valid=True, reward=0.0) for t in range(3)]
    store.add_episodes([Episode(episode_id=0, group_id=0, env_id="e", task_id="t", seed=0, turns=turns, run_id="r")])
    return store


def test_columns_round_trip_per_iteration(tmp_path):
    store = _store(tmp_path / "s.sqlite")
    ids = [t.turn_id for t in store.load_episodes("r")[0].turns]
    gap = np.array([[0.5, -0.25, np.nan], [np.nan, np.nan, np.nan], [1.0, 2.0, 3.0]])
    store.set_scores("r", ids, {"prm_logratio": np.array([1.5, -2.0, 0.0]), "gap": gap}, iteration=1)
    store.set_scores("r", ids, {"prm_logratio": np.array([9.0, 9.0, 9.0])}, iteration=2)
    key = store._run_key("r")[0]
    got = read_scores(store._db(), key, ids, 1, ["prm_logratio", "gap", "absent"])
    assert set(got) == {"prm_logratio", "gap"}
    np.testing.assert_array_equal(got["prm_logratio"], [1.5, -2.0, 0.0])
    np.testing.assert_array_equal(got["gap"], gap)  # NaN padding restored to the widest row
    np.testing.assert_array_equal(read_scores(store._db(), key, ids[::-1], 2, ["prm_logratio"])["prm_logratio"], [9.0] * 3)
    with pytest.raises(ValueError, match="expected \\(N,\\) or \\(N, L\\) with N=3"):
        store.set_scores("r", ids, {"bad": np.zeros(2)}, iteration=3)
    assert read_scores(store._db(), key, ids, 3, ["bad"]) == {}
    store.close()


def test_a_store_without_the_table_reads_no_scores(tmp_path):
    conn = sqlite3.connect(tmp_path / "old.sqlite")
    assert read_scores(conn, 1, [0, 1], 1, ["prm_logratio"]) == {}
    conn.close()

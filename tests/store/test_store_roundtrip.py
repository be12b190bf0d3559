"""Turn store: exact round-trip of every Turn field, id assignment, TurnTable, advantages."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow.parquet as pq
import pytest

from agentrl.store import StoreError, TurnStore, export_parquet
from agentrl.types import Episode, EpisodeStatus, Turn, TurnTable


def _turn(t: int, *, reward: float | None = 0.5, hidden: bool = True, **kw) -> Turn:
    rng = np.random.default_rng(t)
    c = 3 + t
    return Turn(
        run_id="", episode_id=kw.pop("episode_id", -1), group_id=kw.pop("group_id", 0), t=t,
        observation=f"obs {t} ünïcode ✓ [bold]not markup[/]", anchor_obs=f"room {t % 2}",
        action=f"Go  East {t}", action_valid=t != 1, reward=reward, terminated=kw.pop("terminated", False),
        truncated=kw.pop("truncated", False), next_anchor_obs=f"room {(t + 1) % 2}",
        prompt_ids=rng.integers(-2**31, 2**31 - 1, size=7 + t, dtype=np.int64).astype(np.int32),
        completion_ids=rng.integers(0, 50000, size=c).astype(np.int32),
        completion_logprobs=np.array([-0.0, -1e-45, -3.4e38] + [-0.1] * t, dtype=np.float32)[:c],
        policy_version=4, hidden=rng.standard_normal(5).astype(np.float32) if hidden else None,
        info={"segment": t, "won": False, "nested": {"ß": [1, 2.5, None, True]}}, **kw,
    )


def _episode(eid: int, gid: int, n: int, **kw) -> Episode:
    turns = [_turn(t, episode_id=eid, group_id=gid) for t in range(n)]
    return Episode(episode_id=eid, group_id=gid, env_id="agentrl/Toy-v0", task_id=f"task-{gid}", seed=gid,
                   turns=turns, **kw)


def _assert_turn_equal(a: Turn, b: Turn) -> None:
    for f in dataclasses.fields(Turn):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert isinstance(y, np.ndarray) and x.dtype == y.dtype, f.name
            # bit-exact: compare the raw bytes (also distinguishes -0.0 from 0.0)
            assert x.tobytes() == y.tobytes(), f.name
        else:
            assert x == y and type(x) is type(y), (f.name, x, y)


def test_every_turn_field_round_trips(tmp_path):
    ep = _episode(-1, 3, 3, run_id="run-a")
    ep.turns[1].reward = None  # unscored turn
    ep.turns[2].hidden = None
    ep.turns[2].terminated = True
    with TurnStore(tmp_path / "s.sqlite") as store:
        store.add_episodes([ep])
        got = store.turns(ep.episode_id, "run-a")
    assert len(got) == 3
    for a, b in zip(ep.turns, got):  # ids written back into ep by add_episodes
        _assert_turn_equal(a, b)
    assert got[1].reward is None and got[2].hidden is None
    assert got[0].completion_logprobs[0].tobytes() == np.float32(-0.0).tobytes()
    assert got[0].info["nested"] == {"ß": [1, 2.5, None, True]}
    # reopening a second time gives the same values
    with TurnStore(tmp_path / "s.sqlite", readonly=True) as store:
        for a, b in zip(ep.turns, store.turns(ep.episode_id, "run-a")):
            _assert_turn_equal(a, b)


def test_ids_are_assigned_per_run_and_written_back(tmp_path):
    store = TurnStore(tmp_path / "s.sqlite")
    first = [_episode(-1, 0, 2), _episode(-1, 0, 3)]
    store.add_episodes(first, run_id="r")
    assert [e.episode_id for e in first] == [0, 1]
    assert [[t.turn_id for t in e.turns] for e in first] == [[0, 1], [2, 3, 4]]
    # parents: previous turn of the same episode; None at t=0
    assert [[t.parent_turn_id for t in e.turns] for e in first] == [[None, 0], [None, 2, 3]]
    assert all(t.run_id == "r" and t.episode_id == e.episode_id for e in first for t in e.turns)
    # explicit ids are kept; -1 continues above every id of the run and the batch
    explicit = _episode(10, 1, 1)
    explicit.turns[0].turn_id = 20
    later = _episode(-1, 1, 2)
    store.add_episodes([explicit, later], run_id="r")
    assert explicit.episode_id == 10 and explicit.turns[0].turn_id == 20
    assert later.episode_id == 11 and [t.turn_id for t in later.turns] == [21, 22]
    # another run has its own id space
    other = _episode(-1, 0, 1)
    store.add_episodes([other], run_id="r2")
    assert other.episode_id == 0 and other.turns[0].turn_id == 0
    assert store.runs() == ["r", "r2"]
    store.close()


def test_bad_input_writes_nothing_and_keeps_stored_data(tmp_path):
    store = TurnStore(tmp_path / "s.sqlite")
    store.add_episodes([_episode(0, 0, 2)], run_id="r")
    before = store.load_episodes("r")
    bad_json = _episode(-1, 0, 2)
    bad_json.turns[1].info = {"x": object()}
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        store.add_episodes([_episode(-1, 1, 1), bad_json], run_id="r")
    nan_reward = _episode(-1, 0, 1)
    nan_reward.turns[0].reward = float("nan")
    with pytest.raises(ValueError, match="nan.*None when unscored|None for an unscored turn"):
        store.add_episodes([nan_reward], run_id="r")
    with pytest.raises(StoreError, match="append-only"):  # episode 0 already stored
        store.add_episodes([_episode(-1, 2, 1), _episode(0, 0, 1)], run_id="r")
    with pytest.raises(ValueError, match="no run_id"):
        store.add_episodes([_episode(-1, 0, 1)])
    wrong_group = _episode(-1, 0, 2)
    wrong_group.turns[1].group_id = 9
    with pytest.raises(ValueError, match="group_id 9"):
        store.add_episodes([wrong_group], run_id="r")
    after = store.load_episodes("r")
    assert len(after) == 1 and len(after[0].turns) == 2
    for a, b in zip(before[0].turns, after[0].turns):
        _assert_turn_equal(a, b)
    # ids of the failed batches were not written back
    assert bad_json.episode_id == -1 and all(t.turn_id == -1 for t in bad_json.turns)
    store.close()


def test_table_matches_from_episodes(tmp_path):
    ok = _episode(-1, 0, 3)
    ok.turns[-1].info = {"won": True}
    err = _episode(-1, 0, 2, status=EpisodeStatus.ENV_ERROR, error="worker died")
    unscored = _episode(-1, 1, 2)
    unscored.turns[0].reward = None
    with TurnStore(tmp_path / "s.sqlite") as store:
        store.add_episodes([ok, err, unscored], run_id="r")
        table = store.table()
        recs = store.episodes()
    expected = TurnTable.from_episodes([ok, err, unscored])
    for f in dataclasses.fields(TurnTable):
        a, b = getattr(table, f.name), getattr(expected, f.name)
        if isinstance(b, np.ndarray):
            np.testing.assert_array_equal(a, b, err_msg=f.name)
        else:
            assert a == b, f.name
    assert table.episode_ok.tolist() == [True] * 3 + [False] * 4
    assert table.parent.tolist() == [-1, 0, 1, -1, 3, -1, 5]
    assert table.hidden.shape == (7, 5)
    assert [(r.n_turns, r.return_, r.success, r.status) for r in recs] == [
        (3, 1.5, True, EpisodeStatus.OK), (2, 1.0, False, EpisodeStatus.ENV_ERROR), (2, None, False, EpisodeStatus.OK)]


def test_table_filters_episodes_and_needs_a_run_when_several(tmp_path):
    with TurnStore(tmp_path / "s.sqlite") as store:
        store.add_episodes([_episode(-1, 0, 2), _episode(-1, 1, 3)], run_id="a")
        store.add_episodes([_episode(-1, 0, 1)], run_id="b")
        with pytest.raises(KeyError, match="holds 2 runs"):
            store.table()
        with pytest.raises(KeyError, match="did you mean 'a'"):
            store.table("aa")
        sub = store.table("a", episode_ids=[1])
    assert sub.episode.tolist() == [1, 1, 1] and sub.parent.tolist() == [-1, 0, 1]


def test_advantages_and_metrics(tmp_path):
    with TurnStore(tmp_path / "s.sqlite") as store:
        store.add_episodes([_episode(-1, 0, 3)], run_id="r")
        store.set_advantages("r", [0, 1, 2], [0.5, -1.0, 0.0], iteration=1, estimator="grpo")
        with pytest.raises(ValueError, match="overwrite=True"):
            store.set_advantages("r", [0], [9.0], iteration=1, estimator="grpo")
        with pytest.raises(ValueError, match="not stored"):
            store.set_advantages("r", [0, 7], [1.0, 1.0], iteration=2, estimator="grpo")
        with pytest.raises(ValueError, match="one value per turn"):
            store.set_advantages("r", [0, 1], [1.0], iteration=2, estimator="grpo")
        with pytest.raises(ValueError, match="non-finite"):
            store.set_advantages("r", [0], [np.inf], iteration=2, estimator="grpo")
        store.set_advantages("r", [1], [2.0], iteration=1, estimator="grpo", overwrite=True)
        store.add_metrics("r", 1, {"loss": 0.25, "success": 0.5})
        adv = store.advantages("r")
        assert [(a.turn_id, a.value) for a in adv] == [(0, 0.5), (1, 2.0), (2, 0.0)]
        assert [(m.iteration, m.name, m.value) for m in store.metrics("r")] == [(1, "loss", 0.25), (1, "success", 0.5)]


def test_export_parquet_is_exact(tmp_path):
    ep = _episode(-1, 2, 2)
    ep.turns[1].hidden = None
    with TurnStore(tmp_path / "s.sqlite") as store:
        store.add_episodes([ep], run_id="r")
        n = export_parquet(store, tmp_path / "out" / "turns.parquet")
    rows = pq.read_table(tmp_path / "out" / "turns.parquet").to_pylist()
    assert n == 2 and len(rows) == 2
    for row, tr in zip(rows, ep.turns):
        assert row["turn_id"] == tr.turn_id and row["task_id"] == "task-2" and row["status"] == "ok"
        assert np.array_equal(np.array(row["prompt_ids"], dtype=np.int32), tr.prompt_ids)
        assert np.array(row["completion_logprobs"], dtype=np.float32).tobytes() == tr.completion_logprobs.tobytes()
    assert rows[1]["hidden"] is None and rows[0]["hidden"] is not None

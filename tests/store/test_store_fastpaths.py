"""The store's fast paths give the same values as the plain ones: columnar ``table()`` vs
``TurnTable.from_episodes``, bulk Parquet export vs loaded turns, the cached C JSON encoder vs
``json.dumps``, and row building for inputs that miss the fast path (numpy scalars, lists,
strided arrays)."""

from __future__ import annotations

import json
import math
import sqlite3

import numpy as np
import pyarrow.parquet as pq
import pytest

from agentrl.store import TurnStore, export_parquet
from agentrl.store.codec import encode_info
from table_asserts import assert_tables_equal

from agentrl.types import Episode, EpisodeStatus, Turn, TurnTable


def _turn(t: int, *, hidden: bool = True, completion: int = 3, info: dict | None = None, **kw) -> Turn:
    rng = np.random.default_rng(t + 17 * completion)
    return Turn(
        run_id="", episode_id=-1, group_id=kw.pop("group_id", 0), t=t, observation=f"obs {t} ✓",
        anchor_obs=kw.pop("anchor", f"room {t % 3}"), action=kw.pop("action", f"Go  East {t % 2}"),
        action_valid=kw.pop("valid", True), reward=kw.pop("reward", 0.25 * t), next_anchor_obs=f"room {(t + 1) % 3}",
        prompt_ids=rng.integers(0, 1000, 5, dtype=np.int32),
        completion_ids=rng.integers(0, 1000, completion, dtype=np.int32),
        completion_logprobs=-rng.random(completion, dtype=np.float32),
        hidden=rng.standard_normal(4).astype(np.float32) if hidden else None, info=info or {}, **kw)


def _episode(gid: int, turns: list[Turn], **kw) -> Episode:
    for tr in turns:
        tr.group_id = gid
    return Episode(-1, gid, "agentrl/Toy-v0", f"task-{gid}", gid, turns=turns, **kw)


def test_table_equals_from_episodes_with_trees_branches_and_filters(tmp_path):
    root = _episode(0, [_turn(t, info={"tree": 3, "won": t == 2}, policy_version=t) for t in range(3)])
    root.turns[1].action = "  go EAST 1 "  # normalises like "Go  East 1"
    with TurnStore(tmp_path / "s.sqlite") as store:
        store.add_episodes([root], run_id="r")
        # a branch from root's turn 1 (explicit parent), invalid actions, an unscored and a failed episode
        branch = _episode(0, [_turn(t, info={"tree": 3, "branch": 7}, valid=t != 1, completion=0 if t else 2)
                              for t in range(2)])
        branch.turns[0].parent_turn_id = root.turns[1].turn_id
        unscored = _episode(1, [_turn(t, reward=None if t == 1 else 1.0) for t in range(2)])
        failed = _episode(1, [_turn(0, action="look")], status=EpisodeStatus.TIMEOUT, error="deadline")
        empty = _episode(2, [])
        store.add_episodes([branch, unscored, failed, empty], run_id="r")
        table = store.table("r")
        assert_tables_equal(table, TurnTable.from_episodes(store.load_episodes("r")))
        assert table.tree.tolist() == [3, 3, 3, 3, 3, -1, -1, -1]
        assert table.branch.tolist() == [-1, -1, -1, 7, 7, -1, -1, -1]
        assert table.parent.tolist() == [-1, 0, 1, 1, 3, -1, 5, -1]
        assert table.episode_ok.tolist() == [True] * 5 + [False] * 3
        assert table.trainable.tolist() == [True, True, True, True, False, True, True, True]
        assert table.hidden.shape == (8, 4)
        assert table.policy_version.dtype == np.int64 and table.policy_version.tolist() == [0, 1, 2, 0, 0, 0, 0, 0]
        # a subset: parents outside it become -1, as in from_episodes
        sub = store.table("r", episode_ids=[1, 3])
        assert_tables_equal(sub, TurnTable.from_episodes(store.load_episodes("r", [1, 3])))
        assert sub.parent.tolist() == [-1, 0, -1] and sub.tree.tolist() == [3, 3, -1]


def test_table_without_hidden_tokens_or_trees(tmp_path):
    eps = [_episode(g, [_turn(t, hidden=t != 1, completion=0) for t in range(3)]) for g in range(2)]
    with TurnStore(tmp_path / "s.sqlite") as store:
        store.add_episodes(eps, run_id="r")
        table = store.table()
        assert_tables_equal(table, TurnTable.from_episodes(store.load_episodes()))
    assert table.hidden is None and table.tree is None and table.branch is None
    assert not table.trainable.any()  # no row has tokens: none trains (issue 19 item 7)
    assert table.anchor_vocab == ("room 0", "room 1", "room 2")


def test_export_matches_loaded_turns(tmp_path):
    eps = [_episode(0, [_turn(t, hidden=t != 1, info={"won": t == 1, "ß": [1.5, None]}) for t in range(3)]),
           _episode(1, [_turn(0, reward=None, completion=0)], status=EpisodeStatus.ENV_ERROR)]
    with TurnStore(tmp_path / "s.sqlite") as store:
        store.add_episodes(eps, run_id="r")
        loaded = store.load_episodes("r")
        n = export_parquet(store, tmp_path / "t.parquet", episodes_per_batch=1)
    rows = pq.read_table(tmp_path / "t.parquet").to_pylist()
    pairs = [(ep, tr) for ep in loaded for tr in ep.turns]
    assert n == len(rows) == len(pairs) == 4
    for row, (ep, tr) in zip(rows, pairs):
        assert (row["run_id"], row["env_id"], row["task_id"], row["seed"], row["status"]) == (
            "r", ep.env_id, ep.task_id, ep.seed, ep.status.value)
        for name in ("episode_id", "group_id", "turn_id", "parent_turn_id", "t", "policy_version", "observation",
                     "anchor_obs", "next_anchor_obs", "action", "action_valid", "reward", "terminated", "truncated"):
            assert row[name] == getattr(tr, name), name
        for name, dtype in (("prompt_ids", np.int32), ("completion_ids", np.int32),
                            ("completion_logprobs", np.float32)):
            assert np.array(row[name], dtype=dtype).tobytes() == getattr(tr, name).tobytes(), name
        assert (row["hidden"] is None) == (tr.hidden is None)
        if tr.hidden is not None:
            assert np.array(row["hidden"], dtype=np.float32).tobytes() == tr.hidden.tobytes()
        assert row["info"] == json.dumps(tr.info)
    assert rows[1]["info"] == '{"won": true, "\\u00df": [1.5, null]}'


@pytest.mark.parametrize("info", [
    {"won": True, "n": 1, "x": 1.0, "f": -2.5e-300, "s": "ünï\n\"q\"", "l": [1, [2, {"a": None}]], "e": {}},
    {1: "int key", "b": False, "big": 2**70},
    {"t": (1, 2), "neg0": -0.0},
])
def test_encode_info_is_compact_json(info):
    assert encode_info(info) == json.dumps(info, separators=(",", ":"), allow_nan=False)
    assert encode_info({}) == "{}"


@pytest.mark.parametrize("bad", [{"x": math.nan}, {"x": [math.inf]}, {"x": object()}, {"x": {1, 2}}])
def test_encode_info_refuses_non_json(bad):
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        encode_info(bad)


def test_encode_info_refuses_a_cycle():
    cyc: dict = {}
    cyc["self"] = cyc
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        encode_info(cyc)


def test_inputs_off_the_fast_path_are_stored_exactly(tmp_path):
    tr = Turn("", -1, np.int64(4), np.int32(0), "o", "a", "act", np.bool_(True), np.float32(0.5),
              terminated=np.bool_(False), truncated=1, policy_version=np.int64(9))
    tr.prompt_ids = np.arange(10, dtype=np.int32)[::2]  # strided
    tr.completion_ids = [5, 6]  # a list set after construction
    tr.completion_logprobs = np.array([-0.5, -1.5], dtype=np.float64)
    tr.hidden = np.arange(3, dtype=">f4")  # big-endian
    ep = Episode(np.int64(-1), 4, "x/Y-v0", "t", 0, turns=[tr])
    with TurnStore(tmp_path / "s.sqlite") as store:
        store.add_episodes([ep], run_id="r")
        got = store.turns(0, "r")[0]
    assert got.prompt_ids.tolist() == [0, 2, 4, 6, 8] and got.completion_ids.tolist() == [5, 6]
    assert got.completion_logprobs.tolist() == [-0.5, -1.5] and got.hidden.tolist() == [0.0, 1.0, 2.0]
    assert (got.group_id, got.t, got.policy_version, got.reward) == (4, 0, 9, 0.5)
    assert (got.action_valid, got.terminated, got.truncated) == (True, False, True)
    with sqlite3.connect(tmp_path / "s.sqlite") as raw:  # flags are 0/1 integers, arrays blobs, as before
        types = raw.execute("SELECT typeof(action_valid), typeof(truncated), typeof(prompt_ids), typeof(hidden), "
                            "typeof(parent_turn_id) FROM turns").fetchone()
    assert types == ("integer", "integer", "blob", "blob", "null")


def test_turn_ids_beyond_the_id_space_are_refused(tmp_path):
    with TurnStore(tmp_path / "s.sqlite") as store:
        ep = Episode(-1, 0, "x/Y-v0", "t", 0, turns=[Turn("", -1, 0, 0, "o", "a", "act", True, 0.0, turn_id=2**40)])
        with pytest.raises(ValueError, match=r"2\*\*40"):
            store.add_episodes([ep], run_id="r")
        ok = Episode(-1, 0, "x/Y-v0", "t", 0, turns=[Turn("", -1, 0, 0, "o", "a", "act", True, 0.0, turn_id=2**40 - 1)])
        store.add_episodes([ok], run_id="r")
        assert store.episodes("r")[0].n_turns == 1 and ok.turns[0].turn_id == 2**40 - 1
        late = Episode(-1, 0, "x/Y-v0", "t", 0, turns=[Turn("", -1, 0, 0, "o", "a", "act", True, 0.0)])
        with pytest.raises(ValueError, match=r"2\*\*40"):  # the next assigned id would be 2**40
            store.add_episodes([late], run_id="r")
        assert len(store.episodes("r")) == 1

"""``TurnStore.split_off``: the resume path moves episodes sampled after a checkpoint to a
sibling run (PITFALLS P7) — every row survives, ids are kept, bad requests move nothing."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.store import StoreError, TurnStore
from agentrl.types import Episode, Turn


def _episode(eid: int, version: int, n: int = 2, parent: int | None = None) -> Episode:
    turns = [Turn(run_id="", episode_id=eid, group_id=eid // 2, t=t, observation=f"o{t}", anchor_obs=f"a{t}",
                  action=f"act {eid}.{t}", action_valid=True, reward=float(t), terminated=t == n - 1, truncated=False,
                  next_anchor_obs=f"a{t + 1}", prompt_ids=np.arange(3 + t, dtype=np.int32),
                  completion_ids=np.array([7, 8], dtype=np.int32),
                  completion_logprobs=np.array([-0.5, -0.25], dtype=np.float32), policy_version=version,
                  parent_turn_id=parent if t == 0 else None)
             for t in range(n)]
    return Episode(episode_id=eid, group_id=eid // 2, env_id="agentrl/Toy-v0", task_id=f"task-{eid // 2}",
                   seed=eid // 2, turns=turns)


def _store_two_iterations(path):
    store = TurnStore(path)
    store.add_episodes([_episode(0, 0), _episode(1, 0)], run_id="r")
    store.set_advantages("r", [0, 1, 2, 3], [0.1, 0.2, 0.3, 0.4], iteration=0, estimator="grpo")
    store.add_episodes([_episode(2, 1), _episode(3, 1)], run_id="r")
    store.set_advantages("r", [4, 5, 6, 7], [0.5, 0.6, 0.7, 0.8], iteration=1, estimator="grpo")
    return store


def test_split_moves_later_episodes_with_turns_and_advantages(tmp_path):
    with _store_two_iterations(tmp_path / "s.sqlite") as store:
        before = store.load_episodes("r", [2, 3])
        moved = store.split_off("r", since_policy_version=1, to_run_id="r.interrupted")
        assert moved == [2, 3]
        assert store.runs() == ["r", "r.interrupted"]
        assert [e.episode_id for e in store.episodes("r")] == [0, 1]
        after = store.load_episodes("r.interrupted")
        assert [[(t.turn_id, t.action, t.prompt_ids.tolist()) for t in e.turns] for e in after] == \
               [[(t.turn_id, t.action, t.prompt_ids.tolist()) for t in e.turns] for e in before]
        assert [(a.turn_id, a.iteration, a.value) for a in store.advantages("r.interrupted")] == \
               [(4, 1, 0.5), (5, 1, 0.6), (6, 1, 0.7), (7, 1, 0.8)]
        assert [a.turn_id for a in store.advantages("r")] == [0, 1, 2, 3]
        # the re-played iteration gets the same episode and turn ids again
        store.add_episodes([_episode(2, 1), _episode(3, 1)], run_id="r")
        assert store.table(run_id="r").turn_id.tolist() == list(range(8))


def test_turnless_episodes_stored_with_or_after_the_first_moved_one_move_too(tmp_path):
    with _store_two_iterations(tmp_path / "s.sqlite") as store:
        failed = Episode(episode_id=4, group_id=2, env_id="agentrl/Toy-v0", task_id="t", seed=2, turns=[],
                         status="env_error", error="reset failed")
        store.add_episodes([failed], run_id="r")
        assert store.split_off("r", since_policy_version=1, to_run_id="r.x") == [2, 3, 4]
        assert [e.episode_id for e in store.episodes("r")] == [0, 1]


def test_the_episode_id_rule_moves_an_async_iteration_sampled_at_older_versions(tmp_path):
    """Issue 52, defect 4: under ``rollout.max_staleness`` 1 the checkpoint after iteration 1
    (engine at version 2) does not cover iteration 2's episodes (ids 4, 5), which were sampled at
    version 1 while iteration 1 updated. The version rule keeps them (the resumed run then
    stored iteration 2 twice); the id rule moves exactly them."""
    with _store_two_iterations(tmp_path / "s.sqlite") as store:
        store.add_episodes([_episode(4, 1), _episode(5, 1)], run_id="r")  # iteration 2, sampled at version 1
        assert store.split_off("r", since_policy_version=2, to_run_id="r.version-rule") == []
        assert store.split_off("r", from_episode_id=4, to_run_id="r.id-rule") == [4, 5]
        assert [e.episode_id for e in store.episodes("r")] == [0, 1, 2, 3]
        store.add_episodes([_episode(4, 2), _episode(5, 2)], run_id="r")  # the re-play: one copy of iteration 2
        assert [e.episode_id for e in store.episodes("r")] == [0, 1, 2, 3, 4, 5]
        with pytest.raises(ValueError, match="exactly one of since_policy_version and from_episode_id"):
            store.split_off("r", since_policy_version=1, from_episode_id=4, to_run_id="r.z")


def test_nothing_to_move_or_unknown_run_writes_nothing(tmp_path):
    with _store_two_iterations(tmp_path / "s.sqlite") as store:
        assert store.split_off("r", since_policy_version=2, to_run_id="r.x") == []
        assert store.split_off("no-such-run", since_policy_version=0, to_run_id="r.y") == []
        assert store.runs() == ["r"]


def test_bad_requests_move_nothing(tmp_path):
    with _store_two_iterations(tmp_path / "s.sqlite") as store:
        store.add_episodes([_episode(0, 0)], run_id="taken")
        with pytest.raises(StoreError, match="already exists"):
            store.split_off("r", since_policy_version=1, to_run_id="taken")
        store.add_episodes([_episode(4, 2, parent=1)], run_id="r")  # branches from a turn of iteration 0
        with pytest.raises(StoreError, match="branch from older turns"):
            store.split_off("r", since_policy_version=2, to_run_id="r.x")
        assert store.runs() == ["r", "taken"]
        assert [e.episode_id for e in store.episodes("r")] == [0, 1, 2, 3, 4]
        assert len(store.advantages("r")) == 8


def test_readonly_store_refuses(tmp_path):
    _store_two_iterations(tmp_path / "s.sqlite").close()
    with TurnStore(tmp_path / "s.sqlite", readonly=True) as store, pytest.raises(StoreError, match="read-only"):
        store.split_off("r", since_policy_version=1, to_run_id="r.x")


def test_table_reads_one_snapshot_while_another_process_writes(tmp_path, monkeypatch):
    """A writer commits between ``table()``'s episode query and its turn query: the table is
    still the state of the first query (before: the new episode's turns leaked in, unscored)."""
    import agentrl.store.sqlite as sqlite_mod

    path = tmp_path / "s.sqlite"
    _store_two_iterations(path).close()
    real = sqlite_mod.build_table

    def write_in_between(*args, **kwargs):
        with TurnStore(path) as other:
            other.add_episodes([_episode(9, 5)], run_id="r")
        return real(*args, **kwargs)

    monkeypatch.setattr(sqlite_mod, "build_table", write_in_between)
    with TurnStore(path) as store:
        table = store.table(run_id="r")
        assert table.episode.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
        monkeypatch.setattr(sqlite_mod, "build_table", real)
        assert store.table(run_id="r").episode.tolist()[-2:] == [9, 9]  # the next read sees it

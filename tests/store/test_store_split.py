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


def test_the_iteration_rule_moves_exactly_what_the_checkpoint_does_not_cover(tmp_path):
    """Issue 52, defect 4. Under ``rollout.max_staleness`` 1 an iteration trains the lowest complete
    groups the workers finished, which may come from a later production, at older versions. Here
    iteration 2 (checkpointed) stored episodes 4, 5 (production 2) and 6, 7 (production 3's first
    group, ids past its own stride); iteration 3 died after storing 8, 9 (sampled at version 1,
    older than the checkpoint's 2) and the failed reset 10. The version rule keeps 8-10 (the
    resumed run then stored iteration 3 twice); an id rule from 8 on would also be right here but
    moves 6, 7 when production 3's groups come first; the iteration tags move exactly 8-10."""
    with TurnStore(tmp_path / "s.sqlite") as store:
        store.add_episodes([_episode(0, 0), _episode(1, 0), _episode(2, 0), _episode(3, 0)], run_id="r", iteration=1)
        store.add_episodes([_episode(4, 1), _episode(5, 1), _episode(6, 1), _episode(7, 1)], run_id="r", iteration=2)
        failed = Episode(episode_id=10, group_id=5, env_id="agentrl/Toy-v0", task_id="t", seed=5, turns=[],
                         status="env_error", error="reset failed")
        store.add_episodes([_episode(8, 1), _episode(9, 1), failed], run_id="r", iteration=3)
        assert store.split_off("r", since_policy_version=2, to_run_id="r.version-rule") == []
        assert store.split_off("r", after_iteration=2, from_episode_id=4, to_run_id="r.iteration-rule") == [8, 9, 10]
        assert [e.episode_id for e in store.episodes("r")] == list(range(8))
        store.add_episodes([_episode(8, 2), _episode(9, 2)], run_id="r", iteration=3)  # the re-play: once
        assert store.split_off("r", after_iteration=3, to_run_id="r.none") == []
        with pytest.raises(ValueError, match="exactly one of since_policy_version and after_iteration"):
            store.split_off("r", since_policy_version=1, after_iteration=2, to_run_id="r.z")


def test_untagged_episodes_of_an_older_store_fall_back_to_the_id_rule(tmp_path):
    with _store_two_iterations(tmp_path / "s.sqlite") as store:  # stored without iteration tags
        store.add_episodes([_episode(4, 1), _episode(5, 1)], run_id="r")  # iteration 2's, sampled at version 1
        assert store.split_off("r", after_iteration=2, from_episode_id=4, to_run_id="r.x") == [4, 5]
        assert [e.episode_id for e in store.episodes("r")] == [0, 1, 2, 3]


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

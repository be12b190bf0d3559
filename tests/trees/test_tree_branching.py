"""Env branching (snapshot vs seeded prefix replay), linked storing and the tree/branch columns.
No model: envs, pool and store only."""

from __future__ import annotations

import numpy as np
import pytest
import trees_fake_envs as fake

from agentrl.env import EnvPool, make
from agentrl.rollout.branching import (EnvTrace, ReplayMismatch, replay_env, replay_prefix, restore_env,
                                       snapshot_env, supports_snapshot)
from agentrl.rollout.tree import add_linked
from agentrl.store import TurnStore
from agentrl.types import Episode, EpisodeStatus, Turn, TurnTable

KW = {"min_rooms": 4, "max_rooms": 4, "max_turns": 12}
PREFIX = ("go east", "look", "go east", "inventory")
SUFFIX = ("go west", "take key", "look", "go east", "go east", "open door")


def _play(env, actions):
    return [env.step(a)[0] for a in actions]


def _trace(env, seed, actions) -> EnvTrace:
    obs0, _ = env.reset(seed=seed)
    return EnvTrace(seed, tuple(actions), (obs0, *_play(env, actions)))


def test_snapshot_and_replay_give_identical_observations():
    env = make("agentrl/Toy-v0", **KW)
    assert supports_snapshot(env)
    trace = _trace(env, 11, PREFIX)
    snap = snapshot_env(env)
    straight = _play(env, SUFFIX)
    assert any("You won" in o for o in straight) or len(set(straight)) > 2  # a real game, not a constant
    restore_env(env, snap)
    by_snapshot = _play(env, SUFFIX)
    fresh = make("agentrl/Toy-v0", **KW)
    last, _ = replay_env(fresh, trace)
    assert last == trace.observations[-1]
    by_replay = _play(fresh, SUFFIX)
    with EnvPool("agentrl/Toy-v0", 2, env_kwargs=KW, num_workers=1) as pool:
        res = replay_prefix(pool, {1: trace, 0: trace.prefix(2)})
        assert res[1].error is None and res[1].obs == trace.observations[-1]
        assert res[0].error is None and res[0].obs == trace.observations[2]
        by_pool = [pool.step({1: a})[1].obs for a in SUFFIX]
    assert by_snapshot == straight == by_replay == by_pool


def test_replay_detects_a_non_deterministic_env():
    fake.register()
    env = make(fake.DRIFT_ID, **KW)
    trace = _trace(env, 3, PREFIX)
    with pytest.raises(ReplayMismatch, match="not deterministic"):
        replay_env(env, trace)  # the same instance: its step counter moved on
    with EnvPool(fake.DRIFT_ID, 1, env_kwargs=KW, num_workers=1) as pool:
        pool.reset([0], [0])
        pool.step({0: "look"})  # the worker's env has now taken one step
        res = replay_prefix(pool, {0: trace})
    assert res[0].error is not None and "not deterministic" in res[0].error and "step 1" in res[0].error


def test_replay_of_an_empty_prefix_is_a_checked_reset():
    env = make("agentrl/Toy-v0", **KW)
    obs0, _ = env.reset(seed=5)
    bad = EnvTrace(5, (), ("something else",))
    with EnvPool("agentrl/Toy-v0", 1, env_kwargs=KW, num_workers=1) as pool:
        good = replay_prefix(pool, {0: EnvTrace(5, (), (obs0,))})[0]
        wrong = replay_prefix(pool, {0: bad})[0]
    assert good.error is None and good.obs == obs0
    assert "after reset" in wrong.error
    with pytest.raises(ValueError, match="one observation per action"):
        EnvTrace(1, ("look",), ("a",))


def _ep(eid, t0, n, tree, parent=None, reward_last=0.0):
    turns = [Turn(run_id="", episode_id=eid, group_id=0, t=t0 + k, observation="o", anchor_obs=f"s{t0 + k}",
                  action="look", action_valid=True, reward=reward_last if k == n - 1 else 0.0,
                  completion_ids=np.array([1, 2]), info={"tree": tree}) for k in range(n)]
    if parent is not None:
        turns[0].info["tree_parent"] = list(parent)
    return Episode(episode_id=eid, group_id=0, env_id="agentrl/Toy-v0", task_id="x", seed=0, turns=turns)


def test_add_linked_stores_parents_first_and_links_branch_turns(tmp_path):
    # children listed before their parents on purpose; episode 12 branches from a branch
    eps = [_ep(12, 3, 1, 0, (11, 2), 1.0), _ep(11, 2, 2, 0, (10, 1)), _ep(10, 0, 3, 0), _ep(13, 0, 2, 1)]
    with TurnStore(tmp_path / "s.sqlite") as store:
        add_linked(store, eps, run_id="r")
        table = store.table(run_id="r")
        turns = {(e.episode_id, tr.t): tr for e in eps for tr in e.turns}
        assert turns[(11, 2)].parent_turn_id == turns[(10, 1)].turn_id
        assert turns[(12, 3)].parent_turn_id == turns[(11, 2)].turn_id
        assert turns[(10, 1)].parent_turn_id == turns[(10, 0)].turn_id and turns[(10, 0)].parent_turn_id is None
        with pytest.raises(ValueError, match="not stored"):
            add_linked(store, [_ep(20, 5, 1, 0, (10, 4))], run_id="r")
    row = {(int(e), int(t)): i for i, (e, t) in enumerate(zip(table.episode, table.t))}
    assert table.tree is not None and list(table.tree) == [0, 0, 0, 0, 0, 0, 1, 1]
    assert table.branch is None
    assert table.parent[row[(12, 3)]] == row[(11, 2)] and table.parent[row[(11, 2)]] == row[(10, 1)]
    is_leaf = np.ones(len(table), bool)
    is_leaf[table.parent[table.parent >= 0]] = False
    assert sorted(k for k, i in row.items() if is_leaf[i]) == [(10, 2), (11, 3), (12, 3), (13, 1)]


def test_from_episodes_fills_branch_and_leaves_other_rows_at_minus_one():
    a = _ep(0, 0, 3, 0)
    b = _ep(1, 2, 1, 0, (0, 1))
    a.turns[2].info["branch"] = 7
    b.turns[0].info["branch"] = 7
    for tr in (*a.turns, *b.turns):
        del tr.info["tree"]
    table = TurnTable.from_episodes([a, b])
    assert table.tree is None and list(table.branch) == [-1, -1, 7, 7]
    failed = Episode(episode_id=2, group_id=0, env_id="e", task_id="x", seed=0, status=EpisodeStatus.ENV_ERROR)
    assert len(TurnTable.from_episodes([failed])) == 0


def test_replay_cli_shows_parent_ids_and_tree_info(tmp_path, capsys):
    from agentrl.cli import main

    eps = [_ep(10, 0, 3, 0), _ep(11, 2, 2, 0, (10, 1))]
    with TurnStore(tmp_path / "s.sqlite") as store:
        add_linked(store, eps, run_id="r")
    capsys.readouterr()
    assert main(["replay", str(tmp_path / "s.sqlite"), "--episode", "11", "--run", "r"]) == 0
    out = capsys.readouterr().out
    parent = eps[0].turns[1].turn_id
    assert f"t=2 turn_id={eps[1].turns[0].turn_id} parent={parent} " in out
    assert f"t=3 turn_id={eps[1].turns[1].turn_id} parent={eps[1].turns[0].turn_id} " in out
    assert '"tree_parent":[10,1]' in out

"""End-to-end: ``agentrl.train.train`` with ``rollout.engines: 2`` (engine worker processes
apart from the trainer) on the toy env with the tiny model: 2 iterations, every stored
turn's ``policy_version`` equals its iteration index (the trainer pushed version it+1
after update it), and the run gives the same TurnTable as with 1 engine worker."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_train_loop import _cfg  # noqa: E402

from agentrl.config import ConfigError, config_from_dict  # noqa: E402
from agentrl.store import TurnStore  # noqa: E402


def _run(tiny_dir, out, engines: int):
    from agentrl.train import train

    cfg = _cfg(tiny_dir, out, name=f"engines{engines}", rollout__engines=engines, run__eval_every=0, run__seed=0)
    return train(cfg, resume=False), cfg


def test_train_with_two_engine_workers_stamps_each_turn_with_its_iteration(tiny_dir, tmp_path):
    result, cfg = _run(tiny_dir, tmp_path, 2)
    assert result.state.iteration == 2 and result.state.policy_version == 2
    first = json.loads((result.run_dir / "metrics.jsonl").read_text().splitlines()[0])
    assert first["update/steps"] >= 1  # iteration 1 sampled from weights an optimizer step changed
    assert first["rollout/engine_restarts"] == 0.0  # the workers' health metric is logged
    per_iteration = cfg.rollout.groups_per_iteration * cfg.rollout.group_size
    with TurnStore(result.store_path, readonly=True) as store:
        episodes = store.load_episodes(result.run_id)
        table = store.table(run_id=result.run_id)
    assert len(episodes) == 2 * per_iteration and all(e.status == "ok" for e in episodes)
    versions = [(t.policy_version, e.episode_id // per_iteration) for e in episodes for t in e.turns]
    assert len(versions) > 2 * per_iteration
    assert all(v == it for v, it in versions)
    assert {it for _, it in versions} == {0, 1}
    one, _ = _run(tiny_dir, tmp_path, 1)  # 1 worker: the same episodes (per-turn seeds, whole groups)
    with TurnStore(one.store_path, readonly=True) as store:
        other = store.table(run_id=one.run_id)
    for col in ("group", "episode", "t", "reward", "action_valid", "anchor_key", "action_key"):
        assert np.array_equal(getattr(table, col), getattr(other, col)), col


def test_engine_workers_refuse_trees_and_harnesses(tiny_dir, tmp_path):
    raw = {"env": {"id": "agentrl/Toy-v0"}, "policy": {"model": str(tiny_dir)},
           "rollout": {"engines": 2, "sampler": "tree"}}
    with pytest.raises(ConfigError, match="rollout.engines=2 runs chain rollouts only"):
        config_from_dict(raw)
    with pytest.raises(ConfigError, match="rollout.engines must be >= 0"):
        config_from_dict({**raw, "rollout": {"engines": -1}})

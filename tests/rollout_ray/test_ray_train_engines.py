"""``agentrl.train.train`` with ``rollout.backend: ray`` and ``rollout.engines: 2`` (engine
actors on a local 2-CPU Ray): 2 iterations, every stored turn's ``policy_version`` equals its
iteration, and the same TurnTable as 1 local engine worker process for the same seed."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'agentrl[ray]'")
torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from test_train_loop import _cfg  # noqa: E402

from agentrl.rollout.ray_backend import ensure_ray  # noqa: E402
from agentrl.store import TurnStore  # noqa: E402


def _table_and_versions(result, per_iteration):
    with TurnStore(result.store_path, readonly=True) as store:
        episodes = store.load_episodes(result.run_id)
        table = store.table(run_id=result.run_id)
    return table, [(t.policy_version, e.episode_id // per_iteration) for e in episodes for t in e.turns]


def test_train_on_ray_engine_actors_equals_local_workers(tiny_dir, tmp_path):
    from agentrl.train import train

    ensure_ray(num_cpus=2)
    try:
        cfg = _cfg(tiny_dir, tmp_path, name="ray", rollout__engines=2, rollout__backend="ray", run__eval_every=0,
                   run__seed=0)
        on_ray = train(cfg, resume=False)
    finally:
        ray.shutdown()
    per_iteration = cfg.rollout.groups_per_iteration * cfg.rollout.group_size
    assert on_ray.state.iteration == 2 and on_ray.state.policy_version == 2
    table, versions = _table_and_versions(on_ray, per_iteration)
    assert len(versions) > 2 * per_iteration and all(v == it for v, it in versions)
    local = train(_cfg(tiny_dir, tmp_path, name="local", rollout__engines=1, run__eval_every=0, run__seed=0),
                  resume=False)
    other, _ = _table_and_versions(local, per_iteration)
    for col in ("group", "episode", "t", "reward", "action_valid", "anchor_key", "action_key"):
        assert np.array_equal(getattr(table, col), getattr(other, col)), col

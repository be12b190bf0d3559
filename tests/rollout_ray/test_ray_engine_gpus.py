"""Ray engine actors ask for GPUs from config (issue 37): ``rollout.engine_gpus`` becomes each
actor's bundle in a placement group and its ``num_gpus``. Checked against Ray's own resource
accounting on a local Ray that *declares* 2 GPUs (no GPU is needed: Ray only counts them): the
placement group's bundles, each actor's assigned resources, distinct GPU ids, and Ray's
``CUDA_VISIBLE_DEVICES`` inside the actor. The engines load on the CPU (a stand-in device).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'agentrl[ray]'")
torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rollout"))
import engine_worker_checks as checks  # noqa: E402

from agentrl.config import ConfigError  # noqa: E402
from agentrl.rollout.engines.factory import open_engine_workers  # noqa: E402
from agentrl.rollout.ray_backend import ensure_ray  # noqa: E402


def test_each_engine_actor_reserves_the_configured_gpu(tiny_dir):
    ensure_ray(num_cpus=2, num_gpus=2)
    try:
        workers = open_engine_workers("ray", 2, checks.spec_of(tiny_dir), checks.initial_state(tiny_dir), 0,
                                      num_cpus_per_worker=0.5, num_gpus_per_worker=1)
        try:
            table = ray.util.placement_group_table(workers.placement_group)
            assert list(table["bundles"].values()) == [{"CPU": 0.5, "GPU": 1.0}] * 2
            envs = workers.worker_env()
            assert [e["resources"]["GPU"] for e in envs] == [1.0, 1.0]
            ids = [tuple(e["gpu_ids"]) for e in envs]
            assert all(len(i) == 1 for i in ids) and len(set(ids)) == 2  # one GPU each, not the same one
            assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == [str(i[0]) for i in ids]  # Ray shows only it
            scores = workers.score(checks.PROBE_PROMPT, checks.PROBE_COMPLETION)
            assert [s.policy_version for s in scores] == [0, 0]
        finally:
            workers.close()
    finally:
        ray.shutdown()


def test_engine_spec_for_ray_actors_uses_cuda_only_with_gpus(tiny_dir, tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
    from test_train_loop import _cfg

    from agentrl.llm.policy import load_policy
    from agentrl.train.steps import engine_spec

    cfg = _cfg(tiny_dir, tmp_path, rollout__engines=2, rollout__backend="ray", rollout__engine_gpus=1)
    policy = load_policy(cfg.policy)
    assert engine_spec(cfg, policy).device == "cuda"
    cpu = _cfg(tiny_dir, tmp_path, rollout__engines=2, rollout__backend="ray")
    assert engine_spec(cpu, policy).device == "cpu"
    gpu_no_gpus = _cfg(tiny_dir, tmp_path, rollout__engines=2, rollout__backend="ray", policy__device="cuda")
    with pytest.raises(ConfigError, match="needs rollout.engine_gpus >= 1"):
        engine_spec(gpu_no_gpus, policy)

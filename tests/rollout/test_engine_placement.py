"""Disaggregated engines (issue 37): worker k gets device k.

``rollout.engine_devices`` → one ``EngineSpec`` per worker (``place_workers``): ``cuda:N`` makes
the worker's process see only GPU N (``CUDA_VISIBLE_DEVICES=N``, set in the child before CUDA
starts) and use it as ``cuda:0``. On this CPU machine the map is checked with a stand-in: the
workers get the real ``CUDA_VISIBLE_DEVICES`` of the map but load their engine on the CPU, and
report what their process sees. Bad maps are refused when the config is read.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

import engine_worker_checks as checks  # noqa: E402

from agentrl.config import ConfigError, config_from_dict  # noqa: E402
from agentrl.rollout.engines import procs  # noqa: E402
from agentrl.rollout.engines.interface import EngineSpec, place_workers  # noqa: E402


def test_place_workers_maps_worker_k_to_its_own_gpu():
    spec = EngineSpec(model="m", device="cuda")
    placed = place_workers(spec, ("cuda:1", "cuda:3", "cpu"), 3)
    assert [(s.visible_devices, s.device) for s in placed] == [("1", "cuda:0"), ("3", "cuda:0"), ("", "cpu")]
    assert place_workers(spec, None, 2) == [spec, spec]
    with pytest.raises(ValueError, match="2 entries for 3"):
        place_workers(spec, ("cuda:0", "cuda:1"), 3)


def test_worker_k_sees_device_k_in_its_own_process(tiny_dir, monkeypatch):
    def stand_in(spec, devices, n):  # the real map, but the engines load on the CPU (no GPU here)
        return [replace(s, device="cpu") for s in place_workers(spec, devices, n)]

    monkeypatch.setattr(procs, "place_workers", stand_in)
    workers = procs.ProcessEngineWorkers(2, checks.spec_of(tiny_dir), checks.initial_state(tiny_dir), 0,
                                         devices=("cuda:0", "cuda:1"))
    try:
        assert [s.visible_devices for s in workers.specs] == ["0", "1"]
        assert workers.worker_env() == [("0", "cpu"), ("1", "cpu")]  # read inside each worker process
        scores = workers.score(checks.PROBE_PROMPT, checks.PROBE_COMPLETION)
        assert [s.policy_version for s in scores] == [0, 0]
    finally:
        workers.close()


def test_bad_device_maps_are_refused_with_the_fix(tiny_dir):
    raw = {"env": {"id": "agentrl/Toy-v0"}, "policy": {"model": str(tiny_dir)}}
    with pytest.raises(ConfigError, match=r"1 entries for rollout.engines=2"):
        config_from_dict({**raw, "rollout": {"engines": 2, "engine_devices": ["cuda:1"]}})
    with pytest.raises(ConfigError, match="not cpu or cuda:N"):
        config_from_dict({**raw, "rollout": {"engines": 1, "engine_devices": ["gpu1"]}})
    with pytest.raises(ConfigError, match="set rollout.engine_gpus"):
        config_from_dict({**raw, "rollout": {"engines": 1, "backend": "ray", "engine_devices": ["cuda:0"]}})
    with pytest.raises(ConfigError, match="give rollout.engine_devices"):
        config_from_dict({**raw, "rollout": {"engines": 1, "engine_gpus": 1}})

"""Rollout engine workers as Ray actors (``RayEngineWorkers``) on a local Ray with 2 CPUs:
the same checks as the local processes (tests/rollout/engine_worker_checks.py) — 1 vs 2
actors give the same TurnTable, a pushed update reaches every actor, a killed actor is
restarted and its unfinished episodes come back aborted."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'agentrl[ray]'")
torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rollout"))
import engine_worker_checks as checks   # noqa: E402

from agentrl.rollout.engines.factory import open_engine_workers  # noqa: E402
from agentrl.rollout.ray_backend import ensure_ray   # noqa: E402


@pytest.fixture(scope="module")
def actors(tiny_dir):
    ensure_ray(num_cpus=2)
    state = checks.initial_state(tiny_dir)
    # 3 actors on 2 CPUs: each reserves half a CPU (the work is CPU-light, the tiny model)
    one = open_engine_workers("ray", 1, checks.spec_of(tiny_dir), state, 0, num_cpus_per_worker=0.5)
    two = open_engine_workers("ray", 2, checks.spec_of(tiny_dir), state, 0, num_cpus_per_worker=0.5)
    yield one, two
    one.close()
    two.close()
    ray.shutdown()


def test_one_and_two_actors_give_the_same_turn_table(actors, tmp_path):
    assert checks.check_same_table(*actors, tmp_path) > 6


def test_pushed_update_reaches_every_actor(actors, tiny_dir):
    assert checks.check_push(actors[1], tiny_dir) <= 1e-4


def test_killed_actor_is_restarted_and_its_episodes_aborted(actors):
    checks.check_kill(actors[1])

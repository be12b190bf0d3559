"""RayEnvPool: the same rollout as the local EnvPool for the same seeds (episodes and
TurnTable), and EnvPool's crash isolation (raise / hang / die → error result, restart).

A local Ray with 2 CPUs is started once per module (~10-20 s on the loaded 2-core dev
machine); the crash-isolation test (actor restarts, ~20 s) is ``slow``."""

from __future__ import annotations

import dataclasses
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'agentrl[ray]'")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "env"))  # envpool_faulty_envs (test-only env)
import envpool_faulty_envs as faulty  # noqa: E402

from agentrl.env.pool import EnvPool  # noqa: E402
from agentrl.llm.base import SamplingParams  # noqa: E402
from agentrl.llm.scripted import ScriptedEngine  # noqa: E402
from agentrl.rollout.agent_loop import LoopConfig  # noqa: E402
from agentrl.rollout.collector import CollectConfig, collect  # noqa: E402
from agentrl.rollout.ray_backend import RayEnvPool, ensure_ray, make_env_pool  # noqa: E402
from agentrl.types import TurnTable  # noqa: E402

ACTIONS = ["go east", "go west", "take key", "open door", "look", "dance"]


@pytest.fixture(scope="module")
def ray_local():
    faulty.register()
    ensure_ray(num_cpus=2)
    yield
    ray.shutdown()


def _engine(tokenizer) -> ScriptedEngine:
    """A policy that is a pure function of the prompt ids: crc32(prompt) picks the action."""
    eos = tokenizer.eos_token_id

    def script(prompt: np.ndarray, _call: int) -> list[int]:
        a = ACTIONS[zlib.crc32(prompt.astype(np.int64).tobytes()) % len(ACTIONS)]
        return tokenizer.encode(f"<action>{a}</action>", add_special_tokens=False) + [eos]

    return ScriptedEngine(script, eos_token_id=eos, max_context=2048)


def _turn_fields(ep) -> list[tuple]:
    return [(t.t, t.observation, t.action, t.reward, t.terminated, t.truncated, t.action_valid, t.anchor_obs,
             t.prompt_ids.tolist(), t.completion_ids.tolist()) for t in ep.turns]


def test_ray_rollout_equals_local_rollout(ray_local, tiny_tokenizer):
    from agentrl.llm.chat import ChatRenderer

    cfg = CollectConfig(env_id="agentrl/Toy-v0", n_groups=3, group_size=2, seed=7, num_slots=4, progress=False,
                        loop=LoopConfig(context="chat", max_turns=6), sampling=SamplingParams(max_tokens=32, seed=1))
    with EnvPool(cfg.env_id, 4, num_workers=2) as pool:
        local = collect(_engine(tiny_tokenizer), ChatRenderer(tiny_tokenizer), cfg, pool=pool)
    with RayEnvPool(cfg.env_id, 4, num_workers=2) as pool:
        remote = collect(_engine(tiny_tokenizer), ChatRenderer(tiny_tokenizer), cfg, pool=pool)
    assert len(local) == len(remote) == 6
    n_turns = sum(len(e.turns) for e in local)
    assert n_turns > 6  # episodes really played several turns
    assert len({e.task_id for e in local}) == 3  # three different tasks (seeds 7, 8, 9)
    for a, b in zip(local, remote):
        assert (a.episode_id, a.group_id, a.seed, a.task_id, a.status) == (b.episode_id, b.group_id, b.seed, b.task_id, b.status)
        assert _turn_fields(a) == _turn_fields(b)
    ta, tb = TurnTable.from_episodes(local), TurnTable.from_episodes(remote)
    for f in dataclasses.fields(TurnTable):
        x, y = getattr(ta, f.name), getattr(tb, f.name)
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y, err_msg=f.name)
        else:
            assert x == y, f.name


@pytest.mark.slow
def test_ray_pool_isolates_raise_hang_and_death(ray_local):
    with RayEnvPool(faulty.FAULTY_ID, 4, num_workers=2, step_timeout_s=3.0, reset_timeout_s=60.0) as pool:
        with pytest.raises(RuntimeError, match="never reset"):
            pool.step({0: "look"})
        with pytest.raises(ValueError, match="distinct"):
            pool.reset([0, 0], [1, 2])
        first = pool.reset([0, 1, 2, 3], [10, 11, 12, 13])
        assert [first[s].obs.split(" ", 1)[1] for s in range(4)] == [f"reset seed={s}" for s in (10, 11, 12, 13)]
        pids = {s: first[s].obs.split()[0] for s in range(4)}
        assert pids[0] == pids[2] != pids[1] == pids[3]  # slot i lives in actor i % 2
        res = pool.step({0: "raise", 1: "a"})
        assert "ValueError: boom from FaultyEnv" in res[0].error and res[1].error is None
        assert res[1].obs.endswith("step 1: a") and res[1].reward == 1.0
        res = pool.step({0: "x"})  # the env was rebuilt but its episode is gone
        assert "no running episode" in res[0].error
        res = pool.step({1: "hang", 2: "b"})
        assert "timed out after 3s" in res[1].error and res[2].error is None and res[2].reward == 1.0
        assert pool.restarts == 1
        res = pool.step({3: "c"})  # sibling of the hung slot: its actor was restarted
        assert "worker was restarted" in res[3].error
        res = pool.step({2: "die"})
        assert "worker actor died" in res[2].error and pool.restarts == 2
        again = pool.reset([0, 1, 2, 3], [1, 2, 3, 4])
        assert all(r.error is None for r in again.values())
        assert again[2].obs.split()[0] != pids[2] and again[1].obs.split()[0] != pids[1]  # fresh actors
        assert pool.step({2: "z"})[2].obs.endswith("step 1: z")
        with pytest.raises(TypeError, match="must be str"):
            pool.step({0: 3})
    with pytest.raises(RuntimeError, match="closed"):
        pool.reset([0], [1])


def test_ray_pool_argument_errors(monkeypatch):
    with pytest.raises(KeyError):
        RayEnvPool("agentrl/Toyy-v0", 2)
    with pytest.raises(ValueError, match="num_workers"):
        RayEnvPool("agentrl/Toy-v0", 2, num_workers=3)
    with pytest.raises(ValueError, match="n >= 1"):
        RayEnvPool("agentrl/Toy-v0", 0)
    with pytest.raises(ValueError, match="unknown rollout.backend"):
        make_env_pool("dask", "agentrl/Toy-v0", 2)
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the extra were not installed
    with pytest.raises(ModuleNotFoundError, match=r"agentrl\[ray\]"):
        RayEnvPool("agentrl/Toy-v0", 2)

"""EnvPool: answers equal in-process stepping; survives an env that raises, hangs or dies."""

from __future__ import annotations

import envpool_faulty_envs as faulty
import pytest

from agentrl.env import EnvPool, EnvPoolError, make


def _pid(res) -> str:
    return res.obs.split()[0]


@pytest.fixture(scope="module")
def pool():
    faulty.register()
    # 4 slots, 2 workers: worker 0 owns slots 0 and 2, worker 1 owns slots 1 and 3
    with EnvPool(faulty.FAULTY_ID, 4, num_workers=2, step_timeout_s=1.0, reset_timeout_s=60.0) as p:
        yield p


def _reset_all(pool):
    res = pool.reset([0, 1, 2, 3], [10, 11, 12, 13])
    assert all(r.error is None for r in res.values()), res
    return {s: _pid(r) for s, r in res.items()}


def test_pool_matches_in_process_toy_episodes():
    seeds = [3, 4, 5]
    with EnvPool("agentrl/Toy-v0", 3, num_workers=2) as p:
        got = p.reset([0, 1, 2], seeds)
        walks = {s: got[s].info["walkthrough"] for s in got}
        traces = {s: [(got[s].obs, got[s].info)] for s in got}
        for t in range(max(map(len, walks.values()))):
            res = p.step({s: w[t] for s, w in walks.items() if t < len(w)})
            for s, r in res.items():
                assert r.error is None
                traces[s].append((r.obs, r.reward, r.terminated, r.truncated, r.info))
    for s, seed in zip([0, 1, 2], seeds):
        env = make("agentrl/Toy-v0")
        want = [env.reset(seed=seed)]
        want += [env.step(a) for a in walks[s]]
        assert traces[s] == want
        assert traces[s][-1][1] == 1.0 and traces[s][-1][2] is True  # the walkthrough wins


def test_env_that_raises_is_rebuilt_in_its_worker(pool):
    pids = _reset_all(pool)
    res = pool.step({0: "raise", 1: "a", 2: "b", 3: "c"})
    assert res[0].error.startswith("env raised ValueError: boom from FaultyEnv")
    assert res[0].obs == "" and res[0].info == {}
    assert [res[s].obs.split(": ")[1] for s in (1, 2, 3)] == ["a", "b", "c"]  # siblings unaffected
    again = pool.step({0: "x", 2: "y"})
    assert "no running episode" in again[0].error and "ValueError" in again[0].error
    assert again[2].obs.endswith("step 2: y")  # slot 2 shares the worker and keeps its episode
    assert _pid(pool.reset([0], [1])[0]) == pids[0]  # same worker process, rebuilt env


def test_env_that_hangs_is_killed_and_restarted(pool):
    pids = _reset_all(pool)
    restarts = pool.restarts
    res = pool.step({0: "hang", 2: "queued", 1: "fine"})
    assert res[0].error == "slot 0: env call timed out after 1s" and 0.9 < res[0].elapsed_s < 5
    assert "not run" in res[2].error  # queued behind the hang in the same worker
    assert res[1].error is None and res[1].obs.endswith("step 1: fine")  # other worker
    assert pool.restarts == restarts + 1
    assert "worker was restarted" in pool.step({2: "x"})[2].error
    new = _reset_all(pool)
    assert new[0] != pids[0] and new[0] == new[2] and new[1] == pids[1]


def test_worker_process_death_is_an_error_and_restarts(pool):
    pids = _reset_all(pool)
    res = pool.step({3: "die", 1: "queued", 0: "fine"})
    assert res[3].error.startswith("slot 3: worker process died (exit code 3)")
    assert "not run" in res[1].error
    assert res[0].error is None
    new = _reset_all(pool)
    assert new[3] != pids[3] and new[0] == pids[0]
    assert pool.step({3: "ok"})[3].obs.endswith("step 1: ok")


def test_sibling_that_answered_before_a_restart_loses_its_episode(pool):
    _reset_all(pool)
    res = pool.step({2: "first", 0: "hang"})  # slot 2 answers, then slot 0 hangs
    assert res[2].error is not None and "after this slot answered" in res[2].error


def test_bad_calls_raise_clear_errors(pool):
    faulty.register()
    with pytest.raises(KeyError, match="did you mean"):
        EnvPool("agentrl/Toyy-v0", 2)
    with EnvPool(faulty.FAULTY_ID, 2, num_workers=1) as p:
        with pytest.raises(RuntimeError, match="never reset"):
            p.step({0: "a"})
        with pytest.raises(ValueError, match="distinct ints"):
            p.reset([0, 2], [1, 2])
        with pytest.raises(ValueError, match="one seed"):
            p.reset([0, 1], [1])
        p.reset([0], [1])
        with pytest.raises(TypeError, match="must be str"):
            p.step({0: 7})
    p.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        p.step({0: "a"})


def test_env_construction_failure_raises_with_worker_traceback():
    with pytest.raises(EnvPoolError, match="min_rooms"):
        EnvPool("agentrl/Toy-v0", 1, env_kwargs={"min_rooms": 1})

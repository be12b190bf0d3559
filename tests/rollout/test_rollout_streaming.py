"""`agentrl rollout --episodes 10**12` streams its jobs (issue 20 item 9): the job list and the
LLM collector's plan are generated as slots free up, so memory stays bounded for any length."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap

import pytest

from agentrl.rollout import RolloutRequest

HUGE = 10**12


def test_lazy_queue_draws_on_demand_and_in_order():
    from agentrl.rollout.jobs import LazyQueue

    drawn = []

    def gen(tag, n):
        for i in range(n):
            drawn.append((tag, i))
            yield (tag, i)

    q = LazyQueue(gen("a", 2))
    q.extend(gen("b", 1))
    q.extend(itertools.count())  # endless: never consumed beyond what is drawn
    assert drawn == [] and q
    assert drawn == [("a", 0)]  # bool looks one ahead, no more
    assert [q.popleft() for _ in range(5)] == [("a", 0), ("a", 1), ("b", 0), 0, 1]
    empty = LazyQueue(iter(()))
    assert not empty
    with pytest.raises(IndexError):
        empty.popleft()


def test_scripted_jobs_and_collector_plan_are_lazy():
    from agentrl.rollout.collector import CollectConfig, iter_planned
    from agentrl.rollout.scripted import _jobs

    jobs = _jobs(RolloutRequest(env_id="agentrl/Toy-v0", policy="random", episodes=HUGE, group=4, seed=7))
    assert not hasattr(jobs, "__len__")
    assert list(itertools.islice(jobs, 5)) == [(0, 0, 7), (1, 0, 7), (2, 0, 7), (3, 0, 7), (4, 1, 8)]
    plan = iter_planned(CollectConfig(env_id="agentrl/Toy-v0", n_groups=HUGE // 2, group_size=2, seed=3), "agentrl/Toy-v0")
    first = list(itertools.islice(plan, 3))
    assert [(e.episode_id, e.group_id, e.seed) for e in first] == [(0, 0, 3), (1, 0, 3), (2, 1, 4)]


def test_collect_keep_false_reports_through_on_episode_only(tiny_tokenizer):
    from agentrl.llm.chat import ChatRenderer
    from agentrl.llm.scripted import ScriptedEngine
    from agentrl.llm.base import SamplingParams
    from agentrl.rollout.agent_loop import LoopConfig
    from agentrl.rollout.collector import CollectConfig, collect

    renderer = ChatRenderer(tiny_tokenizer)
    engine = ScriptedEngine([[*renderer.encode("look").tolist(), renderer.eos_token_id]],
                            eos_token_id=renderer.eos_token_id)
    cfg = CollectConfig(env_id="agentrl/Toy-v0", n_groups=2, group_size=2, seed=0, loop=LoopConfig(max_turns=2),
                        sampling=SamplingParams(max_tokens=8), num_slots=2, num_workers=1, progress=False)
    seen = []
    assert collect(engine, renderer, cfg, on_episode=seen.append, keep=False) == []
    assert sorted(e.episode_id for e in seen) == [0, 1, 2, 3]


_DRIVER = textwrap.dedent("""
    import os, sys, threading, time


    def watchdog(limit_kb):  # the old job list grew ~500 MB/s: stop it at the limit, not at the host's RAM
        while True:
            rss_kb = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
            if rss_kb > limit_kb:
                print("RSS_EXCEEDED", rss_kb, flush=True)
                os._exit(3)
            time.sleep(0.05)


    if __name__ == "__main__":  # env workers are spawned: they re-import this file
        threading.Thread(target=watchdog, args=(int(sys.argv[2]) // 1024,), daemon=True).start()
        import agentrl.cli.rollout as r
        from agentrl.cli import main
        from agentrl.store import TurnStore
        r.FLUSH_EVERY = 4
        orig, calls = TurnStore.add_episodes, []

        def add(self, eps, **kw):
            orig(self, eps, **kw)
            calls.append(len(eps))
            if len(calls) == 3:  # 12 episodes stored: enough; report the peak and stop here
                # VmHWM: this process's own peak (ru_maxrss would carry the forking pytest's over exec)
                hwm = [ln for ln in open("/proc/self/status") if ln.startswith("VmHWM:")][0].split()[1]
                print("STORED", sum(calls), "MAXRSS_KB", hwm, flush=True)
                os._exit(0)

        TurnStore.add_episodes = add
        sys.exit(main(["rollout", "agentrl/Toy-v0", "--episodes", "%d", "--store", sys.argv[1], "--slots", "2",
                       "--workers", "1", "--max-turns", "3"]))
""" % HUGE)


def test_a_trillion_episode_rollout_runs_in_bounded_memory(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(_DRIVER)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout under test
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200",
           "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "s.sqlite"), str(2**30)],
                          capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0 and "STORED 12" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-3000:]
    maxrss_mb = int(proc.stdout.split("MAXRSS_KB")[1].split()[0]) / 1024
    assert maxrss_mb < 400, f"peak RSS {maxrss_mb:.0f} MB"

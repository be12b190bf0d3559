"""SIGTERM to ``agentrl train`` (issue 52, minor): the iteration in progress is abandoned, the
engine workers and env pool close (nothing of the run's process group outlives it), one line
says how to resume, the exit status is 143; the same command then resumes and finishes with
each iteration's episodes stored once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytest.importorskip("torch")

from agentrl.store import TurnStore  # noqa: E402


def _config(tiny_dir, tmp_path) -> str:
    raw = {
        "run": {"name": "term", "out_dir": str(tmp_path), "iterations": 6, "eval_every": 0, "save_every": 1, "seed": 3},
        "env": {"id": "agentrl/Toy-v0", "max_turns": 8, "split": "train"},
        "policy": {"model": str(tiny_dir), "max_tokens": 8, "action_format": "whole", "action_constraint": "admissible"},
        "rollout": {"groups_per_iteration": 2, "group_size": 4, "num_workers": 1, "engines": 1},
        "algorithm": {"estimator": "grpo"},
        "update": {"lr": 1e-2, "micro_batch": 4, "epochs": 1},
        "log": {"console": False},
    }
    path = tmp_path / "term.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_abandons_the_iteration_closes_everything_and_resumes(tiny_dir, tmp_path):
    config = _config(tiny_dir, tmp_path)
    cmd = [sys.executable, "-m", "agentrl", "train", config]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    metrics = tmp_path / "term" / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while not (metrics.is_file() and metrics.read_text().count("\n") >= 1) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)  # during iteration 2 (iteration 1 is logged and checkpointed)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-3000:]
    assert "stopped by SIGTERM; the iteration in progress was abandoned" in err and config in err
    deadline = time.monotonic() + 10
    while _alive(proc.pid) and time.monotonic() < deadline:  # engine worker and env workers are gone too
        time.sleep(0.1)
    assert not _alive(proc.pid)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    with TurnStore(tmp_path / "term" / "store.sqlite", readonly=True) as store:
        ids = sorted(e.episode_id for e in store.episodes("term"))
    assert ids == list(range(6 * 8))


@pytest.mark.slow
@pytest.mark.parametrize("point", ["rollout", "between", "update", "push", "checkpoint"])
def test_sigterm_at_each_point_of_an_asynchronous_iteration_resumes_with_each_iteration_once(tiny_dir, tmp_path,
                                                                                            point):
    """Issue 52: SIGTERM at five named points of iteration 2 of an asynchronous run
    (``max_staleness: 1``; ``sigterm_at.py`` says where each point is), then the same command
    resumes: 3 iterations, each production's 8 episodes stored once, every stored turn credited
    once, what the interrupted iteration stored set aside."""
    raw = yaml.safe_load(open(_config(tiny_dir, tmp_path)))
    raw["run"]["iterations"], raw["run"]["seed"] = 3, 3
    raw["rollout"].update(max_staleness=1, group_size=8)  # seed 3: iterations 2 and 3 update (1 has no contrast)
    config = tmp_path / "async.yaml"
    config.write_text(yaml.safe_dump(raw))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    hooked = [sys.executable, str(Path(__file__).with_name("sigterm_at.py")), point, str(config)]
    first = subprocess.run(hooked, capture_output=True, text=True, env=env, timeout=600)
    assert first.returncode == 143, first.stderr[-3000:]
    assert "stopped by SIGTERM; the iteration in progress was abandoned" in first.stderr
    stored = 1 if point == "rollout" else 2  # the point was reached in iteration 2 (not a later one)
    assert f"[sigterm_at] SIGTERM after {stored} stored iteration(s)" in first.stderr, first.stderr[-2000:]
    done = subprocess.run([sys.executable, "-m", "agentrl", "train", str(config)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    with TurnStore(tmp_path / "term" / "store.sqlite", readonly=True) as store:
        kept = store.load_episodes("term")
        adv = store.advantages("term")
        aside = [r for r in store.runs() if r.startswith("term.interrupted-")]
        aside_n = sum(len(store.episodes(r)) for r in aside)
    assert sorted(e.episode_id for e in kept) == list(range(48))  # each production's 2 groups x 8, once
    turns_of = {it: [a.turn_id for a in adv if a.iteration == it] for it in (1, 2, 3)}
    for it, turns in turns_of.items():
        assert len(turns) == len(set(turns)) > 0, (point, it)
    credited = [t for turns in turns_of.values() for t in turns]
    assert len(credited) == len(set(credited)) == sum(len(e.turns) for e in kept)
    # what iteration 2 stored before the signal is set aside (none before its store, 16 after it)
    assert aside_n == {"rollout": 0, "between": 16, "update": 16, "push": 16, "checkpoint": 0}[point], aside

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

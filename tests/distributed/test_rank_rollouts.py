"""Issue 36: every data-parallel rank rolls out its share of the groups with its own engine.

``torchrun --nproc-per-node 2`` (gloo, FSDP2) on the tiny model: rank r plays the r-th block of
whole groups and rank 0 stores them all — the same episodes (ids, token ids; logprobs within
1e-6) as a 1-process run of the same config (``rollout.turn_seeds``), each turn stamped with
the rank whose engine sampled it; every rank's engine passes the sync probe after each update.
A sync that loads nothing on purpose stops the 2-rank run at the first probe with one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

torch = pytest.importorskip("torch")

from agentrl.store import TurnStore  # noqa: E402
from dist_fixtures import tiny_config  # noqa: E402

HERE = Path(__file__).resolve().parent


def _run(target: list[str], nproc: int | None) -> subprocess.CompletedProcess:
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)] if nproc else []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run([sys.executable, *launcher, *target], env=env, capture_output=True, text=True, timeout=900)


def _config(tiny_dir, tmp_path: Path, name: str) -> Path:
    raw = tiny_config(tiny_dir, tmp_path / "runs", lora=True)
    raw["run"].update(name=name, iterations=2, eval_every=0, save_every=0)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _episodes(tmp_path: Path, name: str):
    with TurnStore(tmp_path / "runs" / name / "store.sqlite", readonly=True) as store:
        return sorted(store.load_episodes(name), key=lambda e: e.episode_id)


def test_two_ranks_store_the_one_process_episodes(tiny_dir, tmp_path):
    two = _run(["-m", "agentrl", "train", str(_config(tiny_dir, tmp_path, "two"))], nproc=2)
    assert two.returncode == 0, two.stdout[-2000:] + two.stderr[-4000:]
    assert "data-parallel run: 2 ranks (gloo, FSDP2), every rank rolls out its share" in two.stderr
    one = _run(["-m", "agentrl", "train", str(_config(tiny_dir, tmp_path, "one"))], nproc=None)
    assert one.returncode == 0, one.stdout[-2000:] + one.stderr[-4000:]
    a, b = _episodes(tmp_path, "one"), _episodes(tmp_path, "two")
    first = [e for e in a if e.episode_id < 8]  # iteration 1: both sampled from the same initial weights
    assert len(a) == len(b) == 16 and [e.episode_id for e in a] == [e.episode_id for e in b]
    for ea, eb in zip(first, b):
        assert (ea.group_id, ea.seed, ea.status, len(ea.turns)) == (eb.group_id, eb.seed, eb.status, len(eb.turns))
        for ta, tb in zip(ea.turns, eb.turns):
            assert np.array_equal(ta.prompt_ids, tb.prompt_ids) and np.array_equal(ta.completion_ids, tb.completion_ids)
            assert np.abs(ta.completion_logprobs - tb.completion_logprobs).max() <= 1e-6
            assert tb.info["engine_rank"] == eb.group_id and "engine_rank" not in ta.info  # group g on rank g
    assert any(t.reward for e in first for t in e.turns)  # a signal to train on at iteration 1
    assert {t.policy_version for e in b if e.episode_id >= 8 for t in e.turns} == {1}
    lines = [json.loads(x) for x in (tmp_path / "runs" / "two" / "metrics.jsonl").read_text().splitlines()]
    assert lines[0]["update/steps"] >= 1
    for m in lines:  # every rank's engine copy against the sharded trainer, float32
        assert 0.0 <= m["sync/probe_max_abs_diff"] <= 1e-4, m


def test_a_rank_sync_that_loads_nothing_stops_at_the_first_probe(tiny_dir, tmp_path):
    proc = _run([str(HERE / "noop_sync_main.py"), str(_config(tiny_dir, tmp_path, "noop"))], nproc=2)
    assert proc.returncode != 0
    lines = [x for x in proc.stderr.splitlines() if "weight sync check failed" in x]
    assert lines and all(x == lines[0] for x in lines)  # the same line on every rank
    assert "weight sync check failed: rank 0's engine at policy version 1: probe logprobs differ from the " \
           "trainer's by " in lines[0]
    assert "Traceback" not in proc.stderr.split("weight sync check failed")[0]  # no traceback before the line
    with TurnStore(tmp_path / "runs" / "noop" / "store.sqlite", readonly=True) as store:
        assert len(store.load_episodes("noop")) == 8  # iteration 1 was stored before the sync failed

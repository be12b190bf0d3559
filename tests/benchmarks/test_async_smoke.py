"""``benchmarks/async.py --smoke`` in a subprocess: the toy env and the tiny model at
``rollout.max_staleness`` 0 and 1 (one engine worker apart from the trainer, 3 iterations
each); the JSON has both runs, per-iteration idle fractions in [0, 1], the S = 1 run's
staleness within 1, and the comparison (speed-ups beside the (R + U) / max(R, U) bound)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # two training subprocesses with an engine worker each: ~40 s idle
def test_async_smoke_writes_both_runs_and_the_comparison(tmp_path):
    out = tmp_path / "async.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "async.py"), "--smoke", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert set(res["runs"]) == {"s0", "s1"} and res["smoke"] is True
    for name, run in res["runs"].items():
        assert len(run["iterations"]) == 3
        for it in run["iterations"]:
            assert 0.0 <= it["trainer_idle_frac"] <= 1.0 and 0.0 <= it["engine_idle_frac"] <= 1.0
            assert it["wall_s"] > 0
    assert all(it["staleness_mean"] <= 1.0 for it in res["runs"]["s1"]["iterations"])
    assert all(it["staleness_mean"] == 0.0 for it in res["runs"]["s0"]["iterations"])
    cmp = res["compare"]
    assert cmp["bound"] >= 1.0 and cmp["s1"]["speedup_all"] > 0
    assert set(cmp["s1"]["greedy_success"]) == {"s0", "s1"}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "async.py"), "--staleness", "1,2"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "must include 0" in proc.stderr

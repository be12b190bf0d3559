"""``benchmarks/cell_speed.py`` in a subprocess on the tiny model (K = 5 junction maze, 1 group of
2, 1 iteration, both arms, both settings): every run is in the JSON with its timings; "before"
logs ``correction/kl`` and "after" does not; both settings play the same first iteration
(same seed, same weights: the same success); the summary has a ratio per arm."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]


def test_smoke_run_times_both_settings(tiny_dir, tmp_path):
    out = tmp_path / "cell_speed.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    overrides = [f"policy.model={tiny_dir}", "policy.lora=null", "rollout.groups_per_iteration=1",
                 "rollout.group_size=2", "rollout.num_workers=1"]
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cell_speed.py"), "--out", str(out), *overrides],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    data = json.loads(out.read_text())
    runs = {(r["arm"], r["setting"]): r for r in data["runs"]}
    assert set(runs) == {(a, s) for a in ("grpo", "oracle") for s in ("before", "after")}
    for (arm, setting), r in runs.items():
        assert r["wall_per_iteration_s"] > 0 and len(r["rollout_s"]) == 1 and r["rollout_s"][0] > 0
        if r["correction_logged"] != [False]:  # an iteration without contrast has no update phase at all
            assert setting == "before"
        assert runs[(arm, "before")]["success"] == runs[(arm, "after")]["success"]  # iteration 1: same episodes
    assert all(data["summary"][a]["speedup"] > 0 for a in ("grpo", "oracle")) and data["overrides"] == overrides

"""``benchmarks/rank_rollout.py --smoke`` in a subprocess: one iteration of the tiny model on the
toy env in 1 process and on 2 gloo ranks (every rank rolls out its share), with the main job's
update settings (``update.share_prefix`` under FSDP2 included); the JSON holds both runs'
timings, the ratios, and the check that both stored the same episodes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # two training runs (one under torchrun): ~25 s idle on 2 cores
def test_smoke_run_compares_one_process_with_two_ranks(tmp_path):
    out = tmp_path / "rank_rollout.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rank_rollout.py"), "--smoke", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    result = json.loads(out.read_text())
    same = result["same_episodes"]
    assert same["episodes"] == 8 and same["ids_and_tokens_equal"] and same["max_logprob_gap"] <= 1e-6
    assert same["ranks_seen"] == [0, 1]
    for run in ("one_process", "two_ranks"):
        (it,) = result[run]["iterations"]
        assert it["time/rollout_s"] > 0 and it["sync/probe_s"] > 0 and it["sync/probe_max_abs_diff"] <= 1e-4
    s = result["summary"]
    assert s["rollout_ratio_total"] > 0 and len(s["rollout_ratio_2ranks_over_1proc"]) == 1
    assert result["conditions"]["smoke"] and "rollout 2 ranks / 1 process" in proc.stdout

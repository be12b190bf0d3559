"""``benchmarks/rollout_memory.py --smoke`` in a subprocess: the tiny model at tiny sizes, every
variant (free / trie / grammar rollouts, old and new, and the update) in its own process; the
JSON has every row, the old and new stored logprobs are bit-identical, and the update's old
and new logprobs and gradients agree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("llguidance", reason="needs the grammar extra: pip install 'agentrl[grammar]'")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "rollout_memory.py"


def test_smoke_run_writes_every_row(tmp_path):
    out = tmp_path / "rollout_memory.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--out", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    result = json.loads(out.read_text())
    assert result["run"] == "smoke" and result["conditions"]["threads"] == 1
    assert {"date", "host", "dtype", "torch", "transformers", "load_avg_end"} <= set(result["conditions"])
    assert set(result["rollout"]) == set(result["update"]) == {"mmap-128k"}  # the smoke run: one allocator
    assert set(result["rollout"]["mmap-128k"]) == {"free", "trie", "grammar"}
    for kind, row in result["rollout"]["mmap-128k"].items():
        assert row["same_tokens"] and row["logprobs_bit_identical"] and row["max_abs_logprob_diff"] == 0.0, kind
        for path in ("old", "new"):
            r = row[path]
            assert r["path"] == path and r["kv_cache_mb"] > 0 and r["peak_above_mb"] >= 0
            assert r["completion_tokens"] == [8, 8]  # every row ran the whole budget (no stop fired)
        assert row["ratio_above_model_kv_old_over_new"] > 0
    up = result["update"]["mmap-128k"]
    # entropies are up to ln V ~ 10.8 nats, where an fp32 ulp is ~1e-6: a few ulps of summation-order
    # noise (1.4e-6 seen on an AVX2-only CPU) is not a difference of paths
    assert up["max_abs_logprob_diff"] <= 1e-6 and up["max_abs_entropy_diff"] <= 1e-5 and up["max_rel_grad_diff"] <= 1e-5
    assert up["old"]["union_columns"] * up["old"]["rows"] > up["new"]["trained_tokens"] > 0  # the union computes more

"""``scripts/gpu_check.py`` smoke mode (``--device cpu --model tiny``) in a subprocess: every
section runs (device paths, HF-engine rollout with its cold-cache seeded repeat, the rollout
peak section at tiny sizes, the FSDP2 update through a 1-rank gloo group for LoRA and full
fine-tuning, the weight push) and reports ok, the 2-rank section is skipped without CUDA and
runs as 2 gloo ranks under ``torch.distributed.run`` with ``--dp2 cpu``; without CUDA,
``--device cuda`` exits 2 with a message naming the smoke mode. The KV-cache arithmetic and
the warm-cache drift summary are checked on known values."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.py"
GIB = 2**30


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_smoke_mode_runs_every_section(tmp_path):
    out = tmp_path / "gpu_check.json"
    proc = _run("--device", "cpu", "--model", "tiny", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["ok"] is True
    assert report["environment"]["device"] == "cpu" and report["dist"] == {"backend": "gloo", "world_size": 1,
                                                                             "device": "cpu"}
    paths = report["device_paths"]
    for key in ("policy_on_device", "engine_returns_cpu_numpy", "constrained_follows_trie", "lora_on_device",
                "critic_on_device", "cuda_out_of_range_rejected"):
        assert paths[key] is True, key
    roll = report["rollout"]
    assert roll["ok"] and roll["b2_tokens_per_s"] > 0 and roll["b4_tokens_per_s"] > 0
    assert roll["seeded_repeatable"] is True
    assert roll["warm_cache_reused_tokens"] == 2 * 15  # b=2 prompts of 16 tokens: all but the last from the cache
    assert roll["seeded_repeatable_warm_cache"] in (True, False) and roll["warm_cache_rows_differ"] in (0, 1, 2)
    peak = report["rollout_peak"]
    assert peak["ok"] and (peak["batch"], peak["prompt_tokens"], peak["new_tokens"]) == (4, 32, 8)
    # tiny Qwen2 in bf16: 2 (K, V) × 2 layers × 4 rows × 40 positions × 2 KV heads × head dim 16 × 2 bytes
    assert peak["kv_cache_gib"] == 2 * 2 * 4 * 40 * 2 * 16 * 2 / GIB
    assert peak["model_gib"] == pytest.approx(report["model_params_m"] * 1e6 * 2 / GIB, rel=1e-3)  # + rotary buffers
    assert 4 <= peak["tokens"] <= 32 and peak["tokens_per_s"] > 0 and peak["nocache_tokens_per_s"] > 0
    assert peak["peak_mem_gib"] is None and peak["above_model_kv_gib"] is None  # CPU: no CUDA allocator
    assert peak["passes_same_tokens"] is True  # per-row seeds: the same draws with and without a prefix cache
    assert report["dp2"] == {"skipped": "no CUDA device (--dp2 cpu runs 2 gloo ranks)"}
    for name, mode in (("update_lora", "lora"), ("update_full", "full")):
        sec = report[name]
        assert sec["ok"] and sec["mode"] == mode and sec["fsdp_sharded"], sec
        assert sec["seq_tokens_per_s"] > 0 and sec["weights_changed"] and sec["push_seconds"] > 0
        assert sec["push_logprob_max_gap"] < 0.1
    assert report["update_lora"]["trainable_params_m"] < report["update_full"]["trainable_params_m"]
    assert report["update_full"]["push_version"] == 2  # two pushes into the same engine copy


def test_dp2_cpu_two_gloo_ranks(tmp_path):
    out = tmp_path / "gpu_check.json"
    proc = _run("--device", "cpu", "--model", "tiny", "--dtype", "float32", "--only", "dp2", "--dp2", "cpu",
                "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = json.loads(out.read_text())
    dp2 = report["dp2"]
    assert report["ok"] and dp2["ok"], dp2
    assert "rollout" not in report and "model_params_m" not in report  # dp2 alone builds no model here
    assert (dp2["world_size"], dp2["backend"], dp2["devices"], dp2["steps"]) == (2, "gloo", ["cpu", "cpu"], 2)
    assert len(dp2["step_seconds"]) == 2 and all(t > 0 for t in dp2["step_seconds"])
    assert len(dp2["sync_seconds"]) == 2 and all(t > 0 for t in dp2["sync_seconds"])
    assert len(dp2["probe_gap"]) == 2 and max(dp2["probe_gap"]) <= 1e-4 and dp2["probe_gap_max"] <= 1e-4
    assert dp2["probe_tolerance"] == 1e-3  # float32 weights (agentrl.train.sync.default_tolerance)
    assert all(m > 1e-4 for m in dp2["probe_engine_moved"])  # the sync loaded the trained weights
    assert dp2["probe_engine_moved"][0] == pytest.approx(dp2["probe_trainer_moved"][0], abs=1e-4)
    assert dp2["rows_per_step"] == 6 and dp2["trained_tokens_per_step"] == 36  # tiny preset: 6 rows × 6 tokens
    assert all(math.isfinite(x) for x in dp2["losses"]) and dp2["peak_mem_gib"] == [None, None]


def test_kv_cache_bytes_and_warm_cache_drift():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gpu_check_parts as parts
        import gpu_check_scale as scale
        import transformers
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    cfg = transformers.Qwen2Config(**parts.QWEN25_15B)
    # Qwen2.5-1.5B at the rollout_peak shape: 2 × 28 layers × 128 rows × 4352 positions × 2 KV heads × 128 × 2 B
    assert scale.kv_cache_bytes(cfg, 128, 4096 + 256, torch.bfloat16) == 15_971_909_632
    from agentrl.llm.base import Completion

    def comp(ids, lps):
        return Completion(np.asarray(ids, np.int32), np.asarray(lps, np.float32), finish_reason="stop")

    cold = [comp([5, 6, 7], [-1.0, -2.0, -3.0]), comp([8, 9], [-1.0, -1.0]), comp([4], [-0.5])]
    warm = [comp([5, 6, 9], [-1.25, -2.0, -0.1]), comp([8, 9], [-1.0, -1.0]), comp([4, 3], [-0.5, -2.0])]
    drift = parts.warm_cache_drift(cold, warm)
    assert drift == {"seeded_repeatable_warm_cache": False, "warm_cache_rows_differ": 2,
                     "warm_cache_first_diff_mean": 1.5, "warm_cache_logprob_max_gap": 0.25}
    assert parts.warm_cache_drift(cold, cold)["seeded_repeatable_warm_cache"] is True


def test_only_one_section(tmp_path):
    proc = _run("--device", "cpu", "--model", "tiny", "--only", "rollout")
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert "rollout" in report and "device_paths" not in report and "update_full" not in report


def test_cuda_requested_without_cuda_says_how_to_smoke_test():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: --device cuda runs the real check")
    proc = _run("--device", "cuda", timeout=120)
    assert proc.returncode == 2
    report = json.loads(proc.stdout)
    assert report["ok"] is False and "--device cpu --model tiny" in report["error"]

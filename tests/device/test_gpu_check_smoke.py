"""``scripts/gpu_check.py`` smoke mode (``--device cpu --model tiny``) in a subprocess: every
section runs (device paths, HF-engine rollout, the FSDP2 update through a 1-rank gloo group for
LoRA and full fine-tuning, the weight push) and reports ok; without CUDA, ``--device cuda``
exits 2 with a message naming the smoke mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.py"


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
    for name, mode in (("update_lora", "lora"), ("update_full", "full")):
        sec = report[name]
        assert sec["ok"] and sec["mode"] == mode and sec["fsdp_sharded"], sec
        assert sec["seq_tokens_per_s"] > 0 and sec["weights_changed"] and sec["push_seconds"] > 0
        assert sec["push_logprob_max_gap"] < 0.1
    assert report["update_lora"]["trainable_params_m"] < report["update_full"]["trainable_params_m"]
    assert report["update_full"]["push_version"] == 2  # two pushes into the same engine copy


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

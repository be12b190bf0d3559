"""``benchmarks/scale.py --smoke`` in a subprocess: the tiny model through 1 rank and 2 gloo
ranks (FSDP2) under torchrun, LoRA and full fine-tuning, the data-parallel weight sync and one
engine-worker push; the JSON has every section and its ratios. Without CUDA, ``--device
cuda`` exits 2 with a message naming the CPU run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "scale.py"


def _run(*args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow  # three torchrun / spawn start-ups: ~40 s idle, ~80 s at load 3.5 on 2 cores
def test_smoke_run_writes_every_section(tmp_path):
    out = tmp_path / "scale.json"
    proc = _run("--smoke", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    result = json.loads(out.read_text())
    assert result["run"] == "smoke" and result["conditions"]["backend"] == "gloo"
    assert {"date", "cpus", "load_avg_start", "load_avg_end", "torch"} <= set(result["conditions"])
    tiny = result["models"]["tiny"]
    assert set(tiny["updates"]) == {"1x1", "2x1"}
    one, two = tiny["updates"]["1x1"], tiny["updates"]["2x1"]
    assert (one["world_size"], one["backend"], two["world_size"], two["backend"]) == (1, None, 2, "gloo")
    for mode in ("lora", "full"):
        a, b = one["modes"][mode], two["modes"][mode]
        assert not a["fsdp"] and b["fsdp"]
        assert a["step_s_median"] > 0 and b["step_s_median"] > 0 and len(a["step_s"]) == 1
        assert a["push_mb_names"] == pytest.approx(b["push_mb_names"]) and a["push_mb"] > 0  # the same weights
        assert b["push_mb"] >= a["push_mb"]  # the 2-rank gather materialises the tied LM head apart
        assert abs(a["losses"][1] - b["losses"][1]) < 1e-5  # the same step on 1 and 2 ranks
        assert result["ratios"]["tiny"][mode]["step_2x1_over_1x1"] > 0
        assert result["ratios"]["tiny"][mode]["sync_push_2x1_over_1x1"] > 0
    assert one["modes"]["lora"]["trainable_params_m"] < one["modes"]["full"]["trainable_params_m"]
    assert one["modes"]["lora"]["trainable_params_m"] == pytest.approx(two["modes"]["lora"]["trainable_params_m"])
    push = tiny["engine_push"]["1"]
    assert push["versions_ok"] and push["push_s_median"] > 0 and push["mb_per_s"] > 0 and push["start_s"] > 0


def test_cuda_without_cuda_exits_2():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: --device cuda runs the GPU figures")
    proc = _run("--device", "cuda", timeout=120)
    assert proc.returncode == 2
    report = json.loads(proc.stdout)
    assert report["ok"] is False and "benchmarks/scale.py" in report["error"]

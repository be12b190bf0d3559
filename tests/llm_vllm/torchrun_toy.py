"""One GRPO run on ``agentrl/Toy-v0`` with the vLLM engine under ``torchrun`` (2 gloo ranks), for the
tier's distributed tests: the config (tiny fp32 model, 3 iterations of 2 groups × 4 episodes, seed 25 —
wins and losses in the first two iterations) plus ``rollout`` extras, launched as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml


def run_toy_torchrun(tmp_path: Path, model_dir: Path, name: str, rollout: dict | None = None,
                     timeout: int = 1500) -> tuple[subprocess.CompletedProcess, Path]:
    """Train ``name`` under ``torchrun --nproc-per-node 2``; returns (the finished process, its run dir)."""
    raw = {"run": {"name": name, "out_dir": str(tmp_path / "runs"), "iterations": 3, "eval_every": 0,
                   "save_every": 0, "seed": 25},
           "env": {"id": "agentrl/Toy-v0", "max_turns": 8, "split": "train"},
           "policy": {"model": str(model_dir), "engine": "vllm", "dtype": "float32", "max_tokens": 6,
                      "action_format": "whole", "device": "cpu", "action_constraint": "admissible"},
           "rollout": {"groups_per_iteration": 2, "group_size": 4, "turn_seeds": True, **(rollout or {})},
           "algorithm": {"estimator": "grpo"},
           "update": {"lr": 1e-2, "micro_batch": 2},
           "log": {"console": False}}
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "-m", "agentrl", "train", str(cfg)], env=env, capture_output=True, text=True,
                          timeout=timeout)
    return proc, tmp_path / "runs" / name

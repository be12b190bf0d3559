"""Shared by the tests/distributed runs: the tiny-model toy config that the torchrun and the Ray
launches train (2 iterations × 2 groups × 4 episodes, every turn from its own seed — what the
ranks do — so a 1-process run stores the same episodes; seed 12 gives both winning and losing
episodes in the first iteration, so the update has a signal and the second iteration samples
from changed weights)."""

from __future__ import annotations


def tiny_config(tiny_dir, out_dir, lora: bool) -> dict:
    """The raw config dict (write it as YAML for ``agentrl train``)."""
    return {
        "run": {"name": "dp", "out_dir": str(out_dir), "iterations": 2, "eval_every": 2, "save_every": 1, "seed": 12},
        "env": {"id": "agentrl/Toy-v0", "max_turns": 8, "eval_panel_size": 2},
        "policy": {"model": str(tiny_dir), "max_tokens": 8, "action_format": "whole", "device": "cpu",
                   "action_constraint": "admissible", "lora": {"rank": 4, "alpha": 8.0} if lora else None},
        "rollout": {"groups_per_iteration": 2, "group_size": 4, "num_workers": 1, "turn_seeds": True},
        "algorithm": {"estimator": "gigpo"},
        "update": {"lr": 1e-2, "micro_batch": 2, "minibatch": 5},
        "log": {"console": False},
    }

"""Training with ``policy.engine: vllm``: the trainer's weights reach the vLLM engine after
every update (``agentrl.train.sync.sync_weights``), and a training run completes on CPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agentrl.config import config_from_dict

pytestmark = pytest.mark.vllm


def _cfg(model_dir, out_dir):
    return config_from_dict({
        "run": {"name": "vllm", "out_dir": str(out_dir), "iterations": 1, "eval_every": 0, "seed": 0},
        "env": {"id": "agentrl/Toy-v0", "max_turns": 3, "split": "train"},
        "policy": {"model": str(model_dir), "engine": "vllm", "dtype": "float32", "max_tokens": 6,
                   "action_format": "whole"},
        "rollout": {"groups_per_iteration": 1, "group_size": 2},
        "algorithm": {"estimator": "grpo"},
        "update": {"lr": 1e-2, "micro_batch": 2},
        "log": {"console": False},
    })


def _teacher_forced(model, prompt, completion) -> np.ndarray:
    seq = torch.tensor([list(prompt) + list(completion)])
    with torch.no_grad():
        lp = model(input_ids=seq).logits[0, len(prompt) - 1:-1].float().log_softmax(-1)
    return lp.gather(-1, torch.tensor(completion).unsqueeze(-1)).squeeze(-1).numpy()


def test_sync_weights_after_an_update_reaches_vllm(tiny32_dir, tmp_path):
    from agentrl.llm.policy import load_policy
    from agentrl.train.sync import sync_weights

    policy = load_policy(_cfg(tiny32_dir, tmp_path).policy)
    assert not policy.shares_weights
    prompt, completion = [5, 17, 99, 4], [33, 8, 2]
    before = policy.engine.score(prompt, completion)
    with torch.no_grad():  # a real change of every weight (as an optimizer step would do)
        for p in policy.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    stale = policy.engine.score(prompt, completion)
    assert np.array_equal(before, stale)  # the engine still samples from the old weights
    sync_weights(policy)
    assert policy.engine.policy_version == 1
    fresh = policy.engine.score(prompt, completion)
    assert np.abs(fresh - _teacher_forced(policy.model, prompt, completion)).max() <= 1e-4
    assert np.abs(fresh - before).max() > 1e-3


def test_training_run_with_the_vllm_engine(tiny32_dir, tmp_path):
    from agentrl.store import TurnStore
    from agentrl.train import train

    result = train(_cfg(tiny32_dir, tmp_path), resume=False)
    assert result.state.iteration == 1 and result.state.policy_version == 1
    with TurnStore(result.store_path, readonly=True) as store:
        assert len(store.episodes(result.run_id)) == 2
        table = store.table(run_id=result.run_id)
        assert len(store.advantages(result.run_id)) == len(table) > 0

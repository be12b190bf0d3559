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


@pytest.mark.slow
def test_two_ranks_train_with_their_own_vllm_engines(tiny32_long_dir, tmp_path):
    """Issue 36: ``policy.engine: vllm`` under ``torchrun --nproc-per-node 2`` (gloo): every rank
    rolls out its share of the groups with its own vLLM engine (context: the model's 8192), the
    trainer is FSDP2-sharded, and after each of the 2 updates every rank's engine scores the sync
    probe within 1e-4 of the trainer (float32); rank 0 stores every episode once."""
    import json

    from torchrun_toy import run_toy_torchrun

    from agentrl.store import TurnStore

    proc, run_dir = run_toy_torchrun(tmp_path, tiny32_long_dir, "vllm-dp")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-5000:]
    assert "every rank rolls out its share" in proc.stderr
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2, 3]
    assert all(m.get("update/steps", 0) >= 1 for m in lines[:2])  # the first two updates moved the weights
    for m in lines:
        assert 0.0 <= m["sync/probe_max_abs_diff"] <= 1e-4, m
        assert "correction/kl" in m or not m.get("update/steps")
    with TurnStore(run_dir / "store.sqlite", readonly=True) as store:
        eps = store.load_episodes("vllm-dp")
    assert sorted(e.episode_id for e in eps) == list(range(24))
    assert {t.info["engine_rank"] for e in eps for t in e.turns} == {0, 1}
    assert {(e.episode_id // 8, t.policy_version) for e in eps for t in e.turns} == {(0, 0), (1, 1), (2, 2)}

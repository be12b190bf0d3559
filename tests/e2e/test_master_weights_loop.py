"""Issue 37: bf16 full fine-tuning through the training loop with ``update.master_weights``
(``auto`` → ``on``): the trained parameters are float32 masters (checkpointed as such), the
in-process HF engine becomes a bf16 copy loaded after every update and probed, and a resumed run
ends where an uninterrupted one does, bit for bit. LoRA in bf16 keeps sampling from the trained
model itself (no masters, no copy)."""

from __future__ import annotations

import json

import pytest
import yaml

torch = pytest.importorskip("torch")

from test_train_loop import _cfg, _weights  # noqa: E402


def _bf16(tiny_dir, out, name, iterations, **extra):
    return _cfg(tiny_dir, out, name=name, iterations=iterations, run__eval_every=0, policy__dtype="bfloat16",
                update__lr=1e-5, **extra)


def test_bf16_full_fine_tuning_keeps_float32_masters_and_resumes_bit_exactly(tiny_dir, tmp_path):
    from agentrl.train import train

    ref = train(_bf16(tiny_dir, tmp_path / "ref", "m", 2), resume=False)
    assert yaml.safe_load((ref.run_dir / "config.yaml").read_text())["update"]["master_weights"] == "on"
    weights, _ = _weights(ref.run_dir)
    assert weights and {w.dtype for w in weights.values()} == {torch.float32}
    lines = [json.loads(ln) for ln in (ref.run_dir / "metrics.jsonl").read_text().splitlines()]
    gaps = [ln["sync/probe_max_abs_diff"] for ln in lines if "sync/probe_max_abs_diff" in ln]
    assert len(gaps) == 2 and all(0 <= g < 0.5 for g in gaps)  # the bf16 engine copy was loaded and probed
    train(_bf16(tiny_dir, tmp_path / "split", "m", 1), resume=False)
    resumed = train(_bf16(tiny_dir, tmp_path / "split", "m", 2), resume=True)
    assert resumed.state == ref.state
    again, _ = _weights(resumed.run_dir)
    assert all(torch.equal(weights[k], again[k]) for k in weights)


def test_bf16_lora_samples_from_the_trained_model(tiny_dir):
    from agentrl.distributed import DistContext, trained_policy
    from agentrl.llm.policy import load_policy

    cfg = _bf16(tiny_dir, "unused", "l", 1, policy__lora={"rank": 4, "alpha": 8.0})
    assert cfg.update.master_weights == "off"
    policy = trained_policy(load_policy(cfg.policy), cfg, DistContext())
    assert policy.shares_weights and policy.engine.model is policy.model
    trained = [p for p in policy.model.parameters() if p.requires_grad]
    assert {p.dtype for p in trained} == {torch.float32}
    assert {p.dtype for p in policy.model.parameters() if not p.requires_grad} == {torch.bfloat16}
    loaded = load_policy(cfg.policy)
    own_engine = loaded.engine
    full = trained_policy(loaded, _bf16(tiny_dir, "unused", "f", 1), DistContext())
    assert not full.shares_weights and full.engine.model is not full.model
    # the copy keeps the engine's settings (policy.prefix_cache_mb, policy.decode_attention)
    assert full.engine.prefix_cache is not None and own_engine.prefix_cache is not None
    assert full.engine.prefix_cache.max_bytes == own_engine.prefix_cache.max_bytes
    assert full.engine.attention == own_engine.attention
    assert {p.dtype for p in full.model.parameters()} == {torch.float32}
    assert {p.dtype for p in full.engine.model.parameters()} == {torch.bfloat16}

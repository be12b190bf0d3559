"""Issue 37: a data-parallel run's engine workers start from whole weights gathered on every
rank (``RunParts.start_engines``), never from the FSDP2 shards. Before, rank 0 started them
from ``policy.model``'s ``DTensor`` shards whenever its own engine had no HF copy to read
(``policy.engine: vllm``) and the start died in the bucket copy with "aten.copy_.default got
mixed torch.Tensor and DTensor". Here on a 1-rank gloo group (the FSDP2 code path in one process)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from agentrl.distributed import DistContext, trained_policy  # noqa: E402


@pytest.fixture()
def sharded(tiny_dir, tmp_path, monkeypatch):
    """(cfg, policy sharded by FSDP2 over a 1-rank gloo group, DistContext); the group is left after."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "e2e"))
    from test_train_loop import _cfg

    from agentrl.llm.policy import load_policy

    torch.set_num_threads(1)
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(_port()))
    cfg = _cfg(tiny_dir, tmp_path, rollout__engines=2)
    ctx = DistContext.from_env("cpu", init_single=True)
    try:
        yield cfg, trained_policy(load_policy(cfg.policy), cfg, ctx), ctx
    finally:
        ctx.close()


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_open_engines_refuses_shards_with_a_clear_error(sharded):
    from agentrl.train.steps import open_engines

    cfg, policy, _ = sharded
    shards = dict(policy.model.state_dict())
    assert any(hasattr(v, "full_tensor") for v in shards.values())
    with pytest.raises(ValueError, match="is an FSDP2 shard \\(DTensor\\).*gathers the weights on every rank"):
        open_engines(cfg, policy, shards)


def test_start_engines_gathers_whole_weights_for_rank_0s_workers(sharded, monkeypatch):
    import agentrl.train.loop as loop
    from agentrl.update.lora import inference_state_dict

    cfg, policy, ctx = sharded
    policy.engine.model = None  # rank 0's engine with no readable HF copy (a vLLM engine)
    opened = []
    monkeypatch.setattr(loop, "open_engines", lambda cfg, policy, weights: opened.append(weights) or "workers")
    parts = loop.RunParts(policy, None, None, None, dp=ctx)
    parts.start_engines(cfg, 0)
    assert parts.engines == "workers" and len(opened) == 1
    weights = opened[0]
    assert weights and not any(hasattr(v, "full_tensor") for v in weights.values())
    full = {k: v.full_tensor() for k, v in inference_state_dict(policy.model).items()}
    assert weights.keys() == full.keys()
    assert all(torch.equal(weights[k], full[k]) for k in full)
    parts.start_engines(cfg, 0)  # once per run
    assert len(opened) == 1

"""``DistContext.from_env`` and a default process group it did not make: a 1-rank group (an
in-process vLLM engine makes one for itself) is not a data-parallel run, unless the caller asks
for the 1-rank FSDP2 path (``init_single``); neither context destroys it."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from agentrl.distributed import DistContext  # noqa: E402


def test_a_foreign_one_rank_group_is_not_a_data_parallel_run(tmp_path, monkeypatch):
    import torch.distributed as dist

    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    assert not dist.is_initialized()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        ctx = DistContext.from_env("cpu")
        assert not ctx.distributed and (ctx.rank, ctx.world_size, ctx.backend) == (0, 1, None)
        single = DistContext.from_env("cpu", init_single=True)
        assert single.distributed and single.backend == "gloo" and not single.owns_group
        ctx.close()
        single.close()
        assert dist.is_initialized()  # not theirs to destroy
    finally:
        dist.destroy_process_group()


def test_a_normal_close_waits_for_the_ranks_and_survives_a_group_vllm_already_destroyed(monkeypatch):
    """``close(wait=True)`` barriers, then destroys the group it made; where vLLM's engine
    shutdown destroyed the default group first (the vLLM train path), it has nothing to do
    and raises nothing (CI: 'Default process group has not been initialized')."""
    import torch.distributed as dist

    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    calls = []
    real = dist.barrier
    monkeypatch.setattr(dist, "barrier", lambda *a, **k: (calls.append("barrier"), real(*a, **k))[1])
    ctx = DistContext.from_env("cpu", init_single=True)
    assert ctx.owns_group and dist.is_initialized()
    ctx.close(wait=True)
    assert calls == ["barrier"] and not dist.is_initialized() and not ctx.distributed

    ctx = DistContext.from_env("cpu", init_single=True)
    dist.destroy_process_group()  # what vLLM's cleanup_dist_env_and_memory does
    ctx.close(wait=True)
    assert calls == ["barrier"] and not dist.is_initialized()

    ctx = DistContext.from_env("cpu", init_single=True)
    ctx.close()  # an error path: no barrier a dead peer would never reach
    assert calls == ["barrier"] and not dist.is_initialized()

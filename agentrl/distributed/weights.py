"""The trained weights as an inference engine loads them: plain HF parameter names, LoRA
adapters merged **out of place** (``W + scaling · B·A`` computed into new tensors; the trained
model is never modified, so repeated syncs are bit-stable, also in bf16), gathered from the
FSDP2 shards onto rank 0 when the run is data-parallel.
"""

from __future__ import annotations

import torch

from agentrl.distributed.context import DistContext
from agentrl.update.lora import inference_state_dict, merge_lora_state

__all__ = ["inference_state"]


def inference_state(model: torch.nn.Module, ctx: DistContext) -> dict[str, torch.Tensor] | None:
    """The inference weights of the trained ``model`` (``agentrl.update.lora.merge_lora_state``), on CPU.

    Data-parallel (``ctx.distributed``): a **collective** — every rank must call it; the FSDP2
    shards are all-gathered (``get_model_state_dict(full_state_dict=True, cpu_offload=True)``)
    and rank 0 gets the dict, the other ranks None. One process: the model's own tensors,
    merged (new tensors only where LoRA is merged).
    """
    if ctx.distributed:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if not ctx.is_main:
            return None
        return merge_lora_state(full, model) if hasattr(model, "get_base_model") else full
    return inference_state_dict(model)

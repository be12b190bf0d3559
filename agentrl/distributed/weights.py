"""The trained weights as an inference engine loads them: plain HF parameter names, LoRA
adapters merged **out of place** (``W + scaling · B·A`` computed into new tensors; the trained
model is never modified, so repeated syncs are bit-stable, also in bf16).

Two ways out of the FSDP2 shards of a data-parallel run: ``inference_state`` gathers the whole
dict onto rank 0's CPU (engine workers apart from the trainer, checkpoints' export);
``iter_inference_weights`` streams one parameter at a time to **every** rank, on its own device
(all-gathered there, LoRA merged there), for the engine each rank rolls out with — nothing
goes through rank 0 or the CPU, and at most one parameter (with its adapters) is gathered at
a time. Float32 masters of a half-precision run (``agentrl.update.master_weights``) leave
both ways cast to the model's ``compute_dtype``, the dtype the engines sample in.
"""

from __future__ import annotations

import torch

from agentrl.distributed.context import DistContext
from typing import Iterator

from agentrl.update.lora import inference_state_dict, iter_merged, merge_lora_state
from agentrl.update.master_weights import to_compute_dtype

__all__ = ["inference_state", "iter_inference_weights"]


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
        full = merge_lora_state(full, model) if hasattr(model, "get_base_model") else full
        return {k: to_compute_dtype(model, v) for k, v in full.items()}
    return inference_state_dict(model)


def iter_inference_weights(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(plain HF name, tensor)`` of the trained ``model``'s inference weights, one at a time,
    on the model's device (LoRA merged out of place, ``agentrl.update.lora.iter_merged``).

    FSDP2-sharded (``DTensor`` parameters): each tensor is all-gathered (``full_tensor()``)
    when it is reached — a **collective**: every rank must consume the whole iterator, in
    the same order (it is deterministic). One process: the model's own tensors (do not
    modify them) and new tensors where LoRA is merged.
    """
    state = model.state_dict()

    def full(key: str) -> torch.Tensor:
        value = state[key]
        return value.full_tensor() if hasattr(value, "full_tensor") else value

    for name, value, _ in iter_merged(list(state.keys()), full, model):
        yield name, to_compute_dtype(model, value.detach())

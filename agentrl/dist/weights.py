"""The trained weights as an inference engine loads them: plain HF parameter names, LoRA
adapters merged **out of place** (``W + scaling · B·A`` computed into new tensors; the trained
model is never modified, so repeated syncs are bit-stable, also in bf16), gathered from the
FSDP2 shards onto rank 0 when the run is data-parallel.
"""

from __future__ import annotations

from typing import Mapping

import torch

from agentrl.dist.context import DistContext

__all__ = ["inference_state", "merge_lora"]

_PEFT_PREFIX = "base_model.model."


def _lora_layers(model: torch.nn.Module) -> dict[str, tuple[float, bool]]:
    """``{module name: (scaling, fan_in_fan_out)}`` of every peft LoRA layer with one active adapter.

    Raises:
        NotImplementedError: several active adapters, or DoRA (magnitude vectors).
    """
    out = {}
    for name, mod in model.named_modules():
        if not (hasattr(mod, "lora_A") and hasattr(mod, "scaling") and hasattr(mod, "base_layer")):
            continue
        active = [a for a in getattr(mod, "active_adapters", ["default"]) if a in mod.lora_A]
        if len(active) != 1:
            raise NotImplementedError(f"{name}: {len(active)} active LoRA adapters; merging supports exactly one")
        if getattr(mod, "use_dora", {}).get(active[0], False):
            raise NotImplementedError(f"{name}: DoRA adapters cannot be merged here; use plain LoRA")
        out[name] = (float(mod.scaling[active[0]]), bool(getattr(mod, "fan_in_fan_out", False)))
    return out


def merge_lora(state: Mapping[str, torch.Tensor], model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Plain-HF-named weights from a full (unsharded) state dict of ``model``.

    For a peft LoRA model, each wrapped linear's ``base_layer.weight`` W (out, in) becomes
    ``W + scaling · (B @ A)`` (A (r, in), B (out, r); computed in float32, cast to W's dtype;
    transposed for ``fan_in_fan_out`` layers), adapter tensors are dropped and the
    ``base_model.model.`` / ``.base_layer`` parts of the names removed. A plain model's
    state dict is returned as is (a new dict over the same tensors).

    Raises:
        KeyError: an adapter tensor is missing from ``state``; NotImplementedError: see
        ``_lora_layers``.
    """
    layers = _lora_layers(model)
    if not layers:
        return dict(state)
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if ".lora_" in key:
            continue
        module = key.rsplit(".base_layer.", 1)[0] if ".base_layer." in key else None
        if module in layers and key.endswith(".base_layer.weight"):
            scaling, transposed = layers[module]
            a = state[f"{module}.lora_A.default.weight"].float()
            b = state[f"{module}.lora_B.default.weight"].float()
            delta = (b @ a) * scaling
            value = (value.float() + (delta.T if transposed else delta)).to(value.dtype)
        name = key[len(_PEFT_PREFIX):] if key.startswith(_PEFT_PREFIX) else key
        out[name.replace(".base_layer.", ".")] = value.detach()
    return out


def inference_state(model: torch.nn.Module, ctx: DistContext) -> dict[str, torch.Tensor] | None:
    """The inference weights of the trained ``model`` (see ``merge_lora``), on CPU.

    Data-parallel (``ctx.distributed``): a **collective** — every rank must call it; the FSDP2
    shards are all-gathered (``get_model_state_dict(full_state_dict=True, cpu_offload=True)``)
    and rank 0 gets the dict, the other ranks None. One process: the model's own tensors,
    merged (new tensors only where LoRA is merged).
    """
    if ctx.distributed:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return merge_lora(full, model) if ctx.is_main else None
    return merge_lora(model.state_dict(), model)

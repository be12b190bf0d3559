"""FSDP2 wrapping of a causal LM for the data-parallel update (torchtitan's pattern: one
``fully_shard`` per decoder layer, then one on the root for the embeddings, final norm and
LM head).

Each rank holds 1/N of every parameter, gradient and optimizer state (``DTensor`` shards);
a layer's full weights exist only while it runs (all-gather before, reshard after). The
gradient reduction is a plain **sum** over ranks (divide factor 1), because the data-parallel
step already divides every rank's loss by denominators counted over all ranks
(``agentrl.update.step.update(..., dp=ctx)``): the summed gradient is then exactly the
gradient of the 1-process loss.

A model with float32 master parameters (``agentrl.update.master_weights.keep_master_weights``)
is sharded with ``MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=float32)``:
the float32 shards are the masters the optimizer steps, each layer is all-gathered in the half
dtype and runs forward and backward in it, and its gradients are reduce-scattered and
accumulated in float32.
"""

from __future__ import annotations

import torch

from agentrl.distributed.context import DistContext
from agentrl.update.master_weights import compute_dtype

__all__ = ["decoder_layers", "parallelize"]


def _base_model(model: torch.nn.Module) -> torch.nn.Module:
    """The HF ``PreTrainedModel`` inside a peft wrapper (the model itself otherwise)."""
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) else model


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks of an HF causal LM (peft-wrapped or not), in order: the modules
    whose class is named in the model's ``_no_split_modules`` (e.g. ``Qwen2DecoderLayer``),
    else any module whose class name ends with ``DecoderLayer``.

    Raises:
        ValueError: no decoder layer found (not an HF decoder-only model).
    """
    names = set(getattr(_base_model(model), "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        layers = [m for m in model.modules() if type(m).__name__.endswith("DecoderLayer")]
    if not layers:
        raise ValueError(f"{type(model).__name__} has no decoder layers to shard (no _no_split_modules and no "
                         "*DecoderLayer modules); FSDP2 data parallelism supports Hugging Face decoder-only LMs")
    return layers


def parallelize(model: torch.nn.Module, ctx: DistContext, *, reshard_after_forward: bool = True) -> torch.nn.Module:
    """Shard ``model`` over ``ctx``'s ranks with FSDP2 (in place; returns the same object, now
    an ``FSDPModule``). A no-op in one process (``ctx.distributed`` False).

    The model must already be on ``ctx.device``, in its training dtype, with LoRA adapters
    and gradient checkpointing applied (``agentrl.update.lora.prepare_policy``): wrap last.
    Build the optimizer after wrapping (it must hold the sharded parameters). Float32 masters
    with a ``compute_dtype`` compute in it (see the module docstring).

    Args:
        reshard_after_forward: free each layer's gathered weights after its forward (less
            memory, one more all-gather in backward); False keeps them (faster, ZeRO-2-like).
    Raises:
        ValueError: see ``decoder_layers``.
    """
    if not ctx.distributed:
        return model
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    half = compute_dtype(model)
    mp = MixedPrecisionPolicy(param_dtype=half, reduce_dtype=torch.float32) if half else MixedPrecisionPolicy()
    for layer in decoder_layers(model):
        fully_shard(layer, reshard_after_forward=reshard_after_forward, mp_policy=mp)
    fully_shard(model, reshard_after_forward=reshard_after_forward, mp_policy=mp)
    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.set_gradient_divide_factor(1.0)  # sum, not mean: the loss already has global denominators
            m.set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM
    return model

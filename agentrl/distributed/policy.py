"""The policy of a data-parallel run: an FSDP2-sharded model that trains on every rank, and on
rank 0 a separate, unsharded engine copy that samples rollouts and evaluates.

A sharded model cannot ``generate``: every forward is a collective, and ranks would decode
different numbers of steps. So rank 0 keeps its own full copy (colocated on its device, like
a colocated vLLM engine) that receives the trainer's weights after every update
(``agentrl.distributed.weights.inference_state``: all-gather, LoRA merged), and the other ranks only
train. With ``rollout.engines: K`` the rollouts run on the engine workers instead and rank 0's
copy only evaluates.
"""

from __future__ import annotations

import copy

import torch

from agentrl.distributed.context import DistContext
from agentrl.distributed.parallel import parallelize
from agentrl.llm.policy import Policy

__all__ = ["engine_copy", "distribute_policy"]


def engine_copy(policy: Policy):
    """A new ``HFEngine`` over a deep copy of ``policy.model`` (call it before LoRA is applied:
    the copy is the plain HF model the merged weights load into), same ids, context and device.

    Raises:
        ValueError: the policy's engine is not an in-process HF engine (``policy.engine: hf``).
    """
    from agentrl.llm.hf import HFEngine

    if not isinstance(policy.engine, HFEngine):
        raise ValueError(f"data-parallel training samples with an HF engine copy on rank 0; policy.engine is "
                         f"{type(policy.engine).__name__} — set policy.engine: hf")
    with torch.no_grad():
        model = copy.deepcopy(policy.model).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return HFEngine(model, eos_token_id=policy.engine.eos_token_id, pad_token_id=policy.engine.pad_token_id,
                    max_context=policy.engine.max_context, num_threads=None)


def distribute_policy(policy: Policy, ctx: DistContext, sampler=None) -> Policy:
    """Shard ``policy.model`` (LoRA and gradient checkpointing already applied) over ``ctx``'s
    ranks; rank 0's engine becomes ``sampler`` (from ``engine_copy``), the other ranks keep
    theirs only as a version counter. The result never shares weights with its engine:
    ``sync_weights`` pushes after every update. Build the optimizer afterwards.
    """
    model = parallelize(policy.model, ctx)
    engine = sampler if ctx.is_main and sampler is not None else policy.engine
    return Policy(engine=engine, renderer=policy.renderer, model=model, pad_id=policy.pad_id, shares_weights=False)

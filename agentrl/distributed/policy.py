"""The policy of a data-parallel run: an FSDP2-sharded model that trains on every rank, and on
**every** rank an engine of its own that samples that rank's share of the rollouts.

A sharded model cannot ``generate``: every forward is a collective, and ranks would decode
different numbers of steps. So each rank keeps a full, unsharded engine colocated on its
device (verl's hybrid-engine pattern): an HF copy of the model (``engine_copy``), or the
rank's own vLLM engine (``policy.engine: vllm``). After every update each rank's engine gets
the new weights straight from the shards on its device
(``agentrl.distributed.weights.iter_inference_weights``: all-gathered one parameter at a time,
LoRA merged there). Rank 0's engine also evaluates. With ``rollout.engines: K`` the rollouts
run on the engine workers instead (fed from rank 0), and the ranks' engines only evaluate.
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
    ranks; each rank's engine becomes its ``sampler`` (from ``engine_copy``) when given, else
    stays the policy's own (a vLLM engine, which never shared the trained weights). The
    result never shares weights with its engine: ``sync_weights`` pushes after every update.
    Build the optimizer afterwards.
    """
    model = parallelize(policy.model, ctx)
    engine = sampler if sampler is not None else policy.engine
    return Policy(engine=engine, renderer=policy.renderer, model=model, pad_id=policy.pad_id, shares_weights=False)

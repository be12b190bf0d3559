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

``trained_policy`` puts it together for the training loop, also in one process, where float32
master weights (``update.master_weights: on``) likewise need an engine copy of their own in
``policy.dtype``.
"""

from __future__ import annotations

import copy

import torch

from agentrl.config import Config, resolve_master_weights
from agentrl.distributed.context import DistContext
from agentrl.distributed.parallel import parallelize
from agentrl.llm.policy import Policy
from agentrl.update.lora import prepare_policy
from agentrl.update.master_weights import keep_master_weights

__all__ = ["engine_copy", "distribute_policy", "trained_policy"]


def engine_copy(policy: Policy):
    """A new ``HFEngine`` over a deep copy of ``policy.model`` (call it before LoRA is applied:
    the copy is the plain HF model the merged weights load into), same ids, context, device,
    dtype, prefix-cache size and decode attention as ``policy.engine``.

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
    src = policy.engine
    cache_mb = src.prefix_cache.max_bytes >> 20 if getattr(src, "prefix_cache", None) is not None else 0
    return HFEngine(model, eos_token_id=src.eos_token_id, pad_token_id=src.pad_token_id,
                    max_context=src.max_context, num_threads=None, prefix_cache_mb=cache_mb,
                    decode_attention="sdpa" if getattr(src, "attention", None) == "sdpa" else "grouped")


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


def trained_policy(policy: Policy, cfg: Config, ctx: DistContext) -> Policy:
    """``policy`` (just loaded, ``agentrl.llm.policy.load_policy``) ready to train on this rank:
    gradient checkpointing and LoRA applied (``agentrl.update.lora.prepare_policy``); with
    ``update.master_weights`` on, the parameters made float32 masters computing in
    ``policy.dtype`` (``agentrl.update.master_weights.keep_master_weights``: FSDP2 mixed
    precision on N ranks, autocast in one process); sharded over ``ctx``'s ranks. An in-process
    HF engine keeps sampling from the trained model itself only in one process without masters;
    otherwise it becomes a copy in ``policy.dtype`` (``engine_copy``, taken before LoRA and the
    float32 cast) that ``agentrl.train.sync.sync_weights`` loads after every update.
    Build the optimizer afterwards.

    Raises:
        ConfigError: see ``agentrl.config.resolve_master_weights``.
    """
    masters = resolve_master_weights(cfg) == "on"
    sampler = engine_copy(policy) if policy.shares_weights and (ctx.distributed or masters) else None
    policy.model = prepare_policy(policy.model, cfg.update, cfg.policy.lora)
    if masters:
        keep_master_weights(policy.model, getattr(torch, cfg.policy.dtype), autocast=not ctx.distributed)
    if ctx.distributed:
        return distribute_policy(policy, ctx, sampler)
    if sampler is not None:
        return Policy(engine=sampler, renderer=policy.renderer, model=policy.model, pad_id=policy.pad_id,
                      shares_weights=False)
    if policy.shares_weights:
        policy.engine.model = policy.model
    return policy

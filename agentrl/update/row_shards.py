"""No-gradient forward passes split by rows over the ranks of a data-parallel run.

The off-policy correction recomputes π_old for every row of an update phase
(``agentrl.update.correction``). Replicated, every rank runs the whole batch; sharded, rank r
runs rows ``r, r + N, …`` and the results are all-gathered, so each rank does 1/N of the
work and every rank ends with the same (B, T) tensor. FSDP2's forward is a collective (each
layer all-gathers its weights), so every rank must run the same number of forward passes: a
rank with fewer rows pads its share with copies of row 0 and drops their results.
"""

from __future__ import annotations

from typing import Protocol

import torch

from agentrl.update.batch import TrainBatch, model_device
from agentrl.update.logprobs import batch_logprobs, forward_token_stats
from agentrl.update.packing import pack_rows, rank_bins, shared_prefix, shared_rank_bins, stub_row
from agentrl.update.shared_prefix import prefix_order
from agentrl.update.varlen_attention import attends_per_segment

__all__ = ["GatherGroup", "rank_rows", "sharded_batch_logprobs", "packed_batch_logprobs"]


class GatherGroup(Protocol):
    """The ranks of a data-parallel run (``agentrl.distributed.DistContext`` implements it)."""

    rank: int
    world_size: int

    def all_gather(self, values: torch.Tensor) -> torch.Tensor:
        """(world_size, *values.shape): every rank's ``values`` in rank order."""


def rank_rows(n_rows: int, rank: int, world_size: int) -> torch.Tensor:
    """int64 row indices of ``rank``'s share of ``n_rows`` rows: ``rank, rank + N, …``."""
    return torch.arange(n_rows, dtype=torch.int64)[rank::world_size]


@torch.no_grad()
def sharded_batch_logprobs(model: torch.nn.Module, batch: TrainBatch, dp: GatherGroup | None, *,
                           micro_batch: int = 4, temperature: float = 1.0, loss_only: bool = False,
                           micro_batch_tokens: int = 0, share_prefix: bool = False) -> torch.Tensor:
    """``agentrl.update.logprobs.batch_logprobs`` of every row of ``batch``, each rank computing
    its share of the rows (``rank_rows``) and the shares all-gathered.

    Args:
        model: the (FSDP2-sharded) policy; every rank calls this with the same ``batch``.
        batch: the B rows (the same on every rank).
        dp: the ranks; None or a 1-rank group runs ``batch_logprobs`` on the whole batch.
        micro_batch / temperature / loss_only: as ``batch_logprobs``.
        micro_batch_tokens: N > 0 packs the rows without padding into forwards of ≤ N tokens
            (``packed_batch_logprobs``), dealt over the ranks by ``packing.rank_bins``;
            ``micro_batch`` is then unused. ``share_prefix`` (with ``loss_only``, on a model
            that attends per segment): rows of one task share a pack, their prefix laid once.
            Padded rows in one process (``dp`` None or 1 rank) with ``share_prefix`` and
            ``loss_only``: the update's own micro-batches — rows in ``prefix_order``, identical
            rows once, each micro-batch's common prefix once (``batch_logprobs(share_prefix=True)``)
            — so π_old is the update's first forward to float rounding, at its cost.
    Returns:
        (B, T) float32 on the CPU, the same on every rank, equal to ``batch_logprobs`` on the
        whole batch up to float rounding (a row's padding differs with its micro-batch).
    Raises:
        ValueError: ``micro_batch`` < 1 (from ``batch_logprobs``).
    """
    if micro_batch_tokens > 0:
        world, rank = (1, 0) if dp is None else (dp.world_size, dp.rank)
        share = share_prefix and loss_only and attends_per_segment(model)
        per_rank = (shared_rank_bins(batch, micro_batch_tokens, world) if share else
                    rank_bins(batch.attention_mask.sum(1).tolist(), micro_batch_tokens, world))
        passes = max(len(b) for b in per_rank)  # the same on every rank: FSDP2's forwards are collectives
        mine = packed_batch_logprobs(model, batch, per_rank[rank], passes=passes, temperature=temperature,
                                     loss_only=loss_only, share_prefix=share)
        return mine if world == 1 else dp.all_gather(mine).sum(0)  # rows are disjoint: x + 0 is exact
    if dp is None or dp.world_size == 1:
        if share_prefix and loss_only and batch.num_rows > 1:  # the update's micro-batches: sorted, shared, deduplicated
            order = prefix_order(batch.input_ids, batch.attention_mask)
            part = batch_logprobs(model, batch.select(order), micro_batch=micro_batch, temperature=temperature,
                                  loss_only=True, share_prefix=True)
            return torch.empty_like(part).index_copy_(0, order, part)
        return batch_logprobs(model, batch, micro_batch=micro_batch, temperature=temperature, loss_only=loss_only)
    n, world = batch.num_rows, dp.world_size
    per = -(-n // world)  # rows per rank, the largest share
    mine = rank_rows(n, dp.rank, world)
    padded = torch.cat([mine, torch.zeros(per - mine.numel(), dtype=torch.int64)])  # pad with row 0
    part = batch_logprobs(model, batch.select(padded), micro_batch=micro_batch, temperature=temperature,
                          loss_only=loss_only)  # (per, T') with T' ≤ T
    full = torch.zeros((per, batch.input_ids.shape[1]), dtype=torch.float32)
    full[:, :part.shape[1]] = part
    gathered = dp.all_gather(full)  # (world, per, T)
    out = torch.zeros(batch.input_ids.shape, dtype=torch.float32)
    for r in range(world):
        rows = rank_rows(n, r, world)
        out[rows] = gathered[r, :rows.numel()]
    return out


@torch.no_grad()
def packed_batch_logprobs(model: torch.nn.Module, batch: TrainBatch, bins: list[list[int]], *, passes: int = 0,
                          temperature: float = 1.0, loss_only: bool = False, share_prefix: bool = False) -> torch.Tensor:
    """``batch_logprobs`` of the rows in ``bins``, each bin packed into one sequence without
    padding (``agentrl.update.packing.pack_rows``); ``passes`` > ``len(bins)`` adds no-op
    forwards of two tokens (a data-parallel rank keeping FSDP2's collectives in step).
    ``share_prefix``: each bin's shared prefix laid down once (``packing.shared_prefix``; only
    with ``loss_only`` — the other rows' prefix tokens are not scored — and a model that
    attends per segment).

    Returns:
        (B, T) float32 on the CPU: the binned rows' logprobs (0 on padding and in column 0),
        every other row 0.
    """
    was_training = model.training
    model.eval()
    out = torch.zeros(batch.input_ids.shape, dtype=torch.float32)
    device = model_device(model)
    try:
        for k in range(max(passes, len(bins))):
            if k >= len(bins):
                stub = stub_row(batch).to(device)
                forward_token_stats(model, stub.input_ids, stub.attention_mask, temperature=temperature)
                continue
            mb = batch.select(bins[k])
            pk = pack_rows(mb, shared_prefix(mb) if share_prefix else 0)
            b = pk.batch.to(device)
            lp = forward_token_stats(model, b.input_ids, b.attention_mask, temperature=temperature,
                                     allowed_ids=b.allowed_ids, token_mask=(b.loss_mask > 0) if loss_only else None,
                                     grammar_mask=b.grammar_mask, position_ids=b.position_ids).logprobs
            out[torch.as_tensor(bins[k]), : mb.input_ids.shape[1]] = pk.unpack(lp.cpu())
    finally:
        model.train(was_training)
    return out

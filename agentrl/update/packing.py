"""Padding-free micro-batches: rows packed into one sequence, by token budget, balanced over ranks.

With ``update.micro_batch_tokens`` N > 0 the update does not pad a micro-batch of rows to
its longest row. Instead:

1. ``token_bins``: the minibatch's rows are grouped into micro-batches of at most N real
   tokens (first-fit decreasing on the row lengths; a row longer than N is a micro-batch of
   its own);
2. ``rank_bins`` (data-parallel): the micro-batches are dealt to the ranks so that every rank
   runs the same number of passes (a micro-batch is split in two rather than leaving a rank
   a zero-weight pass, as long as there are rows to split) and about the same number of
   tokens (largest first, to the lightest rank that still has a pass free);
3. ``pack_rows``: a micro-batch's rows are laid end to end in one (1, L) sequence, L = the
   sum of their lengths, with ``position_ids`` restarting at 0 at each row. The forward then
   passes ``attention_mask=None`` and those positions: transformers reads the restarts as
   sequence boundaries (``masking_utils.find_packed_sequence_indices``) and builds a
   block-diagonal causal mask for ``sdpa`` / ``eager`` (the CPU path), or runs the
   flash-attention varlen kernel with ``attn_implementation="flash_attention_2"`` on a GPU.
   Each token sees exactly its own row's prefix at the same positions as in the padded
   forward, so logprobs, losses and gradients equal the padded update's to float rounding
   (tests/update/test_packing.py, tests/distributed/test_dp_packing.py).

The loss is untouched: every (B, T) field of the ``TrainBatch`` is carried to the packed
columns (loss mask, advantages, π_old, turn and episode ids, constraints, importance
weights), and the aggregation denominators are counted over the whole minibatch as before.
A column's logprob is read from the column before it, which for a row's first token is the
previous row's last one: that column is a prompt token, never trained (``build_batch``
requires non-empty prompts), so the head never reads across a boundary.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from agentrl.update.batch import TrainBatch
from agentrl.update.bitmask import BatchMasks

__all__ = ["Packed", "token_bins", "rank_bins", "deal", "shared_prefix", "shared_rank_bins", "pack_rows", "stub_row"]


@dataclass(frozen=True)
class Packed:
    """A micro-batch packed into one sequence.

    Attributes:
        batch: the (1, L) ``TrainBatch``: ``attention_mask`` all ones, ``position_ids`` the
            column of each token in its source row (restarting at 0 at each row).
        rows, cols: (L,) int64, the source row and column of each packed column.
        shape: (B, T) of the source micro-batch.
    """

    batch: TrainBatch
    rows: torch.Tensor
    cols: torch.Tensor
    shape: tuple[int, int]

    def unpack(self, values: torch.Tensor) -> torch.Tensor:
        """(1, L) per-column values → (B, T) in the source layout, 0 on padding (and, in a
        shared-prefix pack, on the prefix columns of every row but the first)."""
        out = values.new_zeros(self.shape)
        out[self.rows.to(values.device), self.cols.to(values.device)] = values[0]
        return out


def token_bins(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Group rows into micro-batches of at most ``budget`` tokens (first-fit decreasing).

    Args:
        lengths: each row's real (attended) token count, ≥ 1.
        budget: tokens per micro-batch, ≥ 1; a row longer than it gets a micro-batch alone.
    Returns:
        Lists of row indices, each sorted ascending; the lists in order of their first row.
    Raises:
        ValueError: ``budget`` < 1.
    """
    if budget < 1:
        raise ValueError(f"token budget must be >= 1, got {budget}; set update.micro_batch_tokens")
    bins: list[list[int]] = []
    free: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda r: (-int(lengths[r]), r)):
        n = int(lengths[i])
        k = next((j for j, f in enumerate(free) if f >= n), None)
        if k is None:
            bins.append([i])
            free.append(budget - n)
        else:
            bins[k].append(i)
            free[k] -= n
    return sorted((sorted(b) for b in bins), key=lambda b: b[0])


def _split(rows: list[int], lengths: Sequence[int]) -> tuple[list[int], list[int]]:
    """Two halves of about equal tokens (longest row first to the lighter half)."""
    halves: tuple[list[int], list[int]] = ([], [])
    load = [0, 0]
    for r in sorted(rows, key=lambda r: -int(lengths[r])):
        k = 0 if load[0] <= load[1] else 1
        halves[k].append(r)
        load[k] += int(lengths[r])
    return sorted(halves[0]), sorted(halves[1])


def rank_bins(lengths: Sequence[int], budget: int, world: int) -> list[list[list[int]]]:
    """``token_bins`` dealt over ``world`` ranks: the same number of micro-batches per rank
    where the rows allow it, about the same tokens per rank.

    The micro-batch count is raised to a multiple of ``world`` by splitting the heaviest
    micro-batch of two or more rows in two (an extra real pass instead of another rank's
    zero-weight one); then the micro-batches, heaviest first, each go to the rank with the
    fewest tokens among those with fewer than ``ceil(count / world)``.

    Args:
        lengths: each row's real token count (the whole minibatch; the same on every rank).
        budget: tokens per micro-batch (``update.micro_batch_tokens``).
        world: number of ranks, ≥ 1.
    Returns:
        Per rank, its micro-batches (lists of row indices); a rank's list may be shorter than
        another's only when there are fewer rows than ranks × passes.
    """
    weight = lambda b: sum(int(lengths[r]) for r in b)  # noqa: E731
    return deal(token_bins(lengths, budget), world, weight, lambda b: list(_split(b, lengths)))


def deal(bins: list[list[int]], world: int, weight, split) -> list[list[list[int]]]:
    """Micro-batches ``bins`` over ``world`` ranks (``rank_bins``' rule) with their cost
    ``weight(bin) -> int`` and ``split(bin) -> [half, half]`` for a bin of two or more rows."""
    bins = list(bins)
    target = -(-len(bins) // world) * world
    while len(bins) < target:
        splittable = [b for b in bins if len(b) > 1]
        if not splittable:
            break
        heavy = max(splittable, key=weight)
        at = bins.index(heavy)
        bins[at:at + 1] = split(heavy)
    per = -(-len(bins) // world)
    out: list[list[list[int]]] = [[] for _ in range(world)]
    heap = [(0, r) for r in range(world)]  # (tokens, rank) of the ranks with a pass free
    for k in sorted(range(len(bins)), key=lambda k: (-weight(bins[k]), k)):
        tokens, r = heapq.heappop(heap)
        out[r].append(k)
        if len(out[r]) < per:
            heapq.heappush(heap, (tokens + weight(bins[k]), r))
    return [[bins[k] for k in sorted(ks)] for ks in out]


def _first_trained(mb: TrainBatch) -> torch.Tensor:
    """(B,) int64 column of each row's first loss-mask token (its length when none)."""
    on = mb.loss_mask > 0
    cols = torch.arange(on.shape[1]).expand_as(on)
    return torch.where(on, cols, mb.attention_mask.sum(1, keepdim=True)).min(1).values


def shared_prefix(mb: TrainBatch) -> int:
    """Tokens that every row of a micro-batch shares at its start and that end before any row's
    first trained token (so no trained token's predecessor is another row's): the part
    ``pack_rows(prefix=...)`` lays down once; 0 for one row."""
    if mb.num_rows < 2:
        return 0
    same = ((mb.input_ids == mb.input_ids[:1]) & (mb.attention_mask > 0)).all(0)
    common = int(same.long().cumprod(0).sum())
    return max(0, min(common, int(_first_trained(mb).min()) - 1))


def shared_rank_bins(batch: TrainBatch, budget: int, world: int) -> list[list[list[int]]]:
    """Micro-batches of rows that share a prefix, dealt over ranks (``deal``): the rows in
    prefix order (``agentrl.update.shared_prefix.prefix_order``, turns of one task side by
    side), cut greedily into runs whose packed cost — the shared prefix once plus every row's
    suffix, as ``shared_prefix`` cuts it — stays within ``budget`` (a row alone may exceed it).

    Returns:
        As ``rank_bins`` (row indices into ``batch``).
    """
    from agentrl.update.shared_prefix import prefix_order

    order = prefix_order(batch.input_ids, batch.attention_mask).tolist()
    at = {r: k for k, r in enumerate(order)}
    lengths = batch.attention_mask.sum(1).tolist()
    first = _first_trained(batch).tolist()
    ids = batch.input_ids.numpy()
    adjacent = []  # common prefix of each row and the next in prefix order (a run's: their minimum)
    for a, b in zip(order, order[1:]):
        n = min(lengths[a], lengths[b])
        differ = np.flatnonzero(ids[a, :n] != ids[b, :n])
        adjacent.append(int(differ[0]) if differ.size else n)

    def cost(rows: list[int]) -> int:  # rows: a run of the prefix order
        ks = sorted(at[r] for r in rows)
        p = 0 if len(rows) < 2 else max(0, min(min(adjacent[ks[0]:ks[-1]]), min(first[r] for r in rows) - 1))
        return p + sum(lengths[r] - p for r in rows)

    bins: list[list[int]] = []
    for r in order:
        if bins and cost(bins[-1] + [r]) <= budget:
            bins[-1].append(r)
        else:
            bins.append([r])
    half = lambda b: [b[: len(b) // 2], b[len(b) // 2:]]  # noqa: E731  (contiguous: each half keeps its prefix)
    return deal(bins, world, cost, half)


def _flat(x: torch.Tensor | None, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor | None:
    return None if x is None else x[rows, cols].unsqueeze(0)


def pack_rows(mb: TrainBatch, prefix: int = 0) -> Packed:
    """Lay the rows of a right-padded micro-batch end to end: (B, T) → (1, L), L = real tokens
    (minus ``prefix`` per row after the first).

    Every (B, T) field is gathered at the packed tokens (``allowed_ids`` (B, T, A) → (1, L, A),
    ``grammar_mask.index`` likewise, its bits shared); ``position_ids`` (1, L) is each token's
    column in its row; the turns all live in row 0, ``turn_value_pos`` moved to their packed
    columns. With ``prefix`` P > 0 (``shared_prefix``: tokens every row shares, before any
    trained one) the first row is laid down whole and every other row from column P on, its
    positions continuing from P: a segment that starts at position P > 0 attends to the pack's
    first P tokens (only ``agentrl.update.varlen_attention.segment_attention`` reads it so).

    Raises:
        ValueError: ``mb`` is already packed (has ``position_ids``), or ``prefix`` is not in
            [0, the shortest row).
    """
    if mb.position_ids is not None:
        raise ValueError("pack_rows got a packed batch (position_ids set); pack the padded micro-batch once")
    lengths = mb.attention_mask.sum(1)
    if not 0 <= prefix < int(lengths.min()):
        raise ValueError(f"shared prefix {prefix} must be in [0, {int(lengths.min())}) (the shortest row)")
    keep = mb.attention_mask > 0
    skip = torch.full_like(lengths, prefix)
    skip[0] = 0
    keep &= torch.arange(keep.shape[1]).unsqueeze(0) >= skip.unsqueeze(1)
    rows, cols = torch.nonzero(keep, as_tuple=True)  # row-major: rows in order, columns in order
    start = torch.cumsum(lengths - skip, 0) - (lengths - skip) - skip  # packed column of (row, col) = start + col
    g = mb.grammar_mask
    packed = dataclasses.replace(
        mb, input_ids=_flat(mb.input_ids, rows, cols), attention_mask=torch.ones_like(rows).unsqueeze(0),
        loss_mask=_flat(mb.loss_mask, rows, cols), advantages=_flat(mb.advantages, rows, cols),
        old_logprobs=_flat(mb.old_logprobs, rows, cols), turn_ids=_flat(mb.turn_ids, rows, cols),
        turn_row=torch.zeros_like(mb.turn_row), turn_value_pos=mb.turn_value_pos + start[mb.turn_row],
        ref_logprobs=_flat(mb.ref_logprobs, rows, cols), allowed_ids=_flat(mb.allowed_ids, rows, cols),
        is_weights=_flat(mb.is_weights, rows, cols), token_episode=_flat(mb.token_episode, rows, cols),
        grammar_mask=None if g is None else BatchMasks(_flat(g.index, rows, cols), g.bits),
        position_ids=cols.unsqueeze(0))
    return Packed(packed, rows, cols, (mb.num_rows, int(mb.input_ids.shape[1])))


def stub_row(batch: TrainBatch) -> TrainBatch:
    """The smallest forward that keeps a rank's FSDP2 collectives in step when it is out of
    rows: the first two tokens of ``batch``'s shortest row (a zero-weight pass)."""
    row = int(torch.argmin(batch.attention_mask.sum(1)))
    one = batch.select([row])
    n = min(2, int(one.input_ids.shape[1]))
    cut = {f.name: getattr(one, f.name) for f in dataclasses.fields(one)
           if isinstance(getattr(one, f.name), torch.Tensor) and getattr(one, f.name).dim() >= 2}
    g = one.grammar_mask
    return dataclasses.replace(one, **{k: v[:, :n] for k, v in cut.items()},
                               grammar_mask=None if g is None else BatchMasks(g.index[:, :n], g.bits))

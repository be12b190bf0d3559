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

import torch

from agentrl.update.batch import TrainBatch
from agentrl.update.bitmask import BatchMasks

__all__ = ["Packed", "token_bins", "rank_bins", "pack_rows", "stub_row"]


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
        """(1, L) per-column values → (B, T) in the source layout, 0 on padding."""
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
    bins = token_bins(lengths, budget)
    weight = lambda b: sum(int(lengths[r]) for r in b)  # noqa: E731
    target = -(-len(bins) // world) * world
    while len(bins) < target:
        split = [b for b in bins if len(b) > 1]
        if not split:
            break
        heavy = max(split, key=weight)
        bins.remove(heavy)
        bins += [h for h in _split(heavy, lengths)]
    per = -(-len(bins) // world)
    out: list[list[list[int]]] = [[] for _ in range(world)]
    heap = [(0, r) for r in range(world)]  # (tokens, rank) of the ranks with a pass free
    for b in sorted(bins, key=lambda b: (-weight(b), b[0])):
        tokens, r = heapq.heappop(heap)
        out[r].append(b)
        if len(out[r]) < per:
            heapq.heappush(heap, (tokens + weight(b), r))
    return [sorted(bins_r, key=lambda b: b[0]) for bins_r in out]


def _flat(x: torch.Tensor | None, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor | None:
    return None if x is None else x[rows, cols].unsqueeze(0)


def pack_rows(mb: TrainBatch) -> Packed:
    """Lay the rows of a right-padded micro-batch end to end: (B, T) → (1, L), L = real tokens.

    Every (B, T) field is gathered at the real tokens (``allowed_ids`` (B, T, A) → (1, L, A),
    ``grammar_mask.index`` likewise, its bits shared); ``position_ids`` (1, L) is each
    token's column in its row; the turns all live in row 0, ``turn_value_pos`` shifted to
    their packed columns.

    Raises:
        ValueError: ``mb`` is already packed (has ``position_ids``).
    """
    if mb.position_ids is not None:
        raise ValueError("pack_rows got a packed batch (position_ids set); pack the padded micro-batch once")
    rows, cols = torch.nonzero(mb.attention_mask > 0, as_tuple=True)  # row-major: rows in order, columns in order
    lengths = mb.attention_mask.sum(1)
    start = torch.cumsum(lengths, 0) - lengths  # (B,) packed column of each row's first token
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

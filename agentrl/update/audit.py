"""The credit audit: every trained token carries its own turn's advantage, and nothing else does
(DESIGN.md invariant 6; issue 49).

Multi-turn RL frameworks have shipped advantages that land on the wrong tokens, or on none
(step-wise advantages misplaced, per-step credit broadcast, tool-output tokens trained, a loss
path that ignored the tool mask), and no test noticed because nothing compared, end to end, the
number an estimator computed for a turn with the number multiplying that turn's trained tokens.
This module does, on every row of every micro-batch, right before the loss: after ``build_batch``,
``TrainBatch.select`` (minibatches, micro-batches, data-parallel shards), ``pack_rows`` and the
rollout correction.

What it checks against (``TurnExpectation``, one per turn, keyed by the store's turn id and built
from the estimator's output and the turn's own sampled tokens, not from the batch):

1. no token outside the loss mask (prompt, observation, tool output, template text, padding)
   carries an advantage, and every trained token belongs to a turn;
2. each turn of a micro-batch sits where its tokens say it does: its completion region (the
   columns ``turn_ids`` gives it) is one contiguous run in one sequence, holds exactly its
   sampled completion ids, and starts at position P (its prompt length) of its sequence
   (``position_ids`` in a packed micro-batch, the column otherwise);
3. its trained tokens are exactly the ones it declared (every completion token, or a span
   estimator's spans), each with the estimator's value for it (float32, as the loss sees it);
4. over one optimizer step, every turn of the minibatch is trained exactly once (summed over
   micro-batches and data-parallel ranks): none dropped, none twice.

A mismatch raises ``CreditAuditError`` with one line naming the row, the episode, the turn and
both values. The map from a turn index to its turn (``TrainBatch.turn_key``) travels with the
batch; the audit trusts it only as far as the turn's own tokens confirm it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import torch

__all__ = ["TurnExpectation", "CreditAuditError", "CreditAudit", "audit_micro_batch"]


class CreditAuditError(RuntimeError):
    """A trained token does not carry its own turn's advantage (or a token outside the loss mask
    carries one, or a turn is missing or trained twice). The message is one line."""


@dataclass(frozen=True)
class TurnExpectation:
    """What one turn must look like in the batch.

    Attributes:
        episode: the turn's episode id (for the message).
        prompt_len: P, the number of prompt tokens before its completion in its own sequence.
        completion_ids: int64 (C,), the sampled completion ids.
        advantages: float64 (C,), the estimator's advantage of each completion token (a per-row
            estimator: its value on every token).
        trained: bool (C,), the completion tokens that train (all, or a span estimator's spans).
    """

    episode: int
    prompt_len: int
    completion_ids: np.ndarray
    advantages: np.ndarray
    trained: np.ndarray

    @property
    def n_trained(self) -> int:
        """The number of tokens this turn trains."""
        return int(self.trained.sum())


def _fail(what: str) -> CreditAuditError:
    return CreditAuditError(f"credit audit: {what} (agentrl.update.audit; a placement bug in batching, packing, "
                            "sharding or masking: please report it with this line)")


def audit_micro_batch(mb, expected: Mapping[int, TurnExpectation]) -> dict[int, int]:
    """Check one micro-batch (``TrainBatch``, padded (B, T) or packed (1, L)) as the loss will see it.

    Args:
        mb: the micro-batch; needs ``turn_key`` (N,) int64 (``build_batch(turn_keys=...)``).
        expected: ``{turn key: TurnExpectation}`` of every turn the update may hold.
    Returns:
        ``{turn key: trained tokens found}`` for the turns of ``mb``.
    Raises:
        CreditAuditError: any check of the module docstring fails (one line: row, episode, turn,
            both values); also when ``mb.turn_key`` is missing.
    """
    if mb.turn_key is None:
        raise _fail("the batch carries no turn keys; build it with build_batch(..., turn_keys=<store turn ids>)")
    mask, adv, tids = mb.loss_mask.detach().cpu(), mb.advantages.detach().cpu(), mb.turn_ids.detach().cpu()
    off = (mask == 0) & (adv != 0)
    if off.any():
        r, c = (int(x) for x in torch.nonzero(off)[0])
        owner = int(tids[r, c])
        who = "no turn (prompt, observation or padding)" if owner < 0 else f"turn {int(mb.turn_key[owner])}"
        raise _fail(f"row {r}, column {c} ({who}) is outside the loss mask but carries advantage {float(adv[r, c])!r}")
    stray = (mask != 0) & (tids < 0)
    if stray.any():
        r, c = (int(x) for x in torch.nonzero(stray)[0])
        raise _fail(f"row {r}, column {c} is trained (loss mask {float(mask[r, c])}) but belongs to no turn")
    ids = mb.input_ids.detach().cpu()
    pos = None if mb.position_ids is None else mb.position_ids.detach().cpu()
    keys = mb.turn_key.detach().cpu().tolist()
    rows, cols = torch.nonzero(tids >= 0, as_tuple=True)
    owners = tids[rows, cols]
    order = torch.argsort(owners * (tids.shape[1] + 1) * (tids.shape[0] + 1) + rows * (tids.shape[1] + 1) + cols)
    rows, cols, owners = rows[order], cols[order], owners[order]
    bounds = torch.searchsorted(owners, torch.arange(len(keys) + 1)).tolist()
    found: dict[int, int] = {}
    for k, key in enumerate(keys):
        exp = expected.get(int(key))
        if exp is None:
            raise _fail(f"turn {key} (index {k}) is in the batch but the estimator gave it no advantage")
        r, c = rows[bounds[k]:bounds[k + 1]], cols[bounds[k]:bounds[k + 1]]
        _check_turn(int(key), exp, r, c, ids, pos, mask, adv)
        found[int(key)] = found.get(int(key), 0) + exp.n_trained
    return found


def _check_turn(key: int, exp: TurnExpectation, r: torch.Tensor, c: torch.Tensor, ids: torch.Tensor,
                pos: torch.Tensor | None, mask: torch.Tensor, adv: torch.Tensor) -> None:
    """Checks 2 and 3 of the module docstring for one turn (``r``, ``c``: its columns, in order)."""
    n = exp.completion_ids.size
    where = f"episode {exp.episode}, turn {key}"
    if r.numel() != n:
        raise _fail(f"{where}: {r.numel()} completion token(s) in the batch, its completion has {n}")
    row = int(r[0])
    if bool((r != row).any()) or (n > 1 and bool((c[1:] - c[:-1] != 1).any())):
        raise _fail(f"row {row}, {where}: its completion tokens are not one contiguous run in one row")
    start = int(c[0]) if pos is None else int(pos[row, c[0]])
    if start != exp.prompt_len or (pos is not None and bool((pos[row, c] != start + torch.arange(n)).any())):
        raise _fail(f"row {row}, {where}: its completion starts at position {start}, after its prompt of "
                    f"{exp.prompt_len} tokens it must start at {exp.prompt_len}")
    got_ids = ids[row, c].numpy()
    if not np.array_equal(got_ids, exp.completion_ids):
        j = int(np.flatnonzero(got_ids != exp.completion_ids)[0])
        raise _fail(f"row {row}, {where}: completion token {j} is id {int(got_ids[j])}, the turn sampled "
                    f"{int(exp.completion_ids[j])}")
    got_mask = mask[row, c].numpy()
    if not np.array_equal(got_mask != 0, exp.trained) or bool(((got_mask != 0) & (got_mask != 1)).any()):
        j = int(np.flatnonzero((got_mask != 0) != exp.trained)[0]) if np.any((got_mask != 0) != exp.trained) else 0
        raise _fail(f"row {row}, {where}: completion token {j} has loss mask {float(got_mask[j])}, the turn trains it: "
                    f"{bool(exp.trained[j])}")
    want = np.where(exp.trained, exp.advantages, 0.0).astype(np.float32)
    got = adv[row, c].numpy()
    if not np.array_equal(got, want):
        j = int(np.flatnonzero(got != want)[0])
        raise _fail(f"row {row}, {where}: completion token {j} carries advantage {float(got[j])!r}, the estimator "
                    f"gave {float(want[j])!r}")


@dataclass
class CreditAudit:
    """The audit of one update phase: the turns' expectations, and counters for the metrics.

    Attributes:
        expected: ``{store turn id: TurnExpectation}`` of every trained turn of the phase.
        rows / tokens: micro-batch rows and trained tokens checked so far; seconds: time spent.
    """

    expected: Mapping[int, TurnExpectation]
    rows: int = 0
    tokens: int = 0
    seconds: float = 0.0
    _step: dict = field(default_factory=dict, repr=False)

    def begin_step(self) -> None:
        """Start counting one optimizer step's micro-batches."""
        self._step = {}

    def check(self, mb) -> None:
        """``audit_micro_batch`` of ``mb``, added to this step's counts. Raises CreditAuditError."""
        t0 = time.perf_counter()
        for key, n in audit_micro_batch(mb, self.expected).items():
            self._step[key] = self._step.get(key, 0) + n
        self.rows += int(mb.num_rows)
        self.tokens += int((mb.loss_mask != 0).sum())
        self.seconds += time.perf_counter() - t0

    def end_step(self, keys: torch.Tensor, dp=None) -> None:
        """Check 4: every turn of the minibatch (``keys``: its ``turn_key``, (N,) int64, the same on
        every rank) was trained exactly once over this step's micro-batches (summed over ``dp``'s
        ranks, a collective there). Raises CreditAuditError naming the first turn that was not."""
        t0 = time.perf_counter()
        order = keys.detach().cpu().tolist()
        counts = torch.tensor([float(self._step.get(int(k), 0)) for k in order], dtype=torch.float64)
        if dp is not None:
            counts = dp.all_reduce(counts)
        for key, n in zip(order, counts.tolist()):
            exp = self.expected.get(int(key))
            want = 0 if exp is None else exp.n_trained
            if n != want:
                ep = "?" if exp is None else exp.episode
                raise _fail(f"episode {ep}, turn {key}: {int(n)} trained token(s) in this optimizer step, its "
                            f"completion trains {want} ({'dropped' if n < want else 'trained more than once'})")
        self.seconds += time.perf_counter() - t0

    def as_metrics(self) -> dict[str, float]:
        """``audit/rows``, ``audit/tokens``, ``audit/seconds`` of the phase so far."""
        return {"audit/rows": float(self.rows), "audit/tokens": float(self.tokens), "audit/seconds": self.seconds}

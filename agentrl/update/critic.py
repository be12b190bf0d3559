"""Turn-level critic for turn-PPO (arXiv 2512.17008; ALGORITHMS.md §10).

``TurnCritic`` = a transformer backbone + a linear value head. The value of turn n,
V(s_n), is read at the **last prompt token** of that turn (``TrainBatch.turn_value_pos``),
i.e. from the full context before the turn's response (ALGORITHMS.md §10.3, PROPOSED).
The critic is trained on the turn returns of ``agentrl.credit``'s turn-level GAE with an
MSE loss, optionally clipped around the rollout-time values (PPO value clipping).

A value depends on the turn's prompt only, so the critic never runs the completion tokens: it
runs each turn's prompt, cut at its last token (``value_rows``). With ``share_prefix`` (the
trainer passes ``update.share_prefix``) it also runs each **distinct** prompt once — every
episode of a group starts from the same prompt, and window prompts repeat whenever a state and
its last actions do — and the prompt prefix that a micro-batch of lexicographically sorted
prompts shares once, on whose key/value cache the rows' suffixes run
(``agentrl.update.shared_prefix``). The loss is still summed over every turn (each copy's return
reaches the one forward's gradient), so the values, the loss and the gradients equal the plain
path's to float rounding (tests/update/test_critic_prefix.py). ``critic_update``'s minibatches
(``update.critic_minibatch``) are runs of sorted distinct prompts on both paths, so the steps
match too.

HiPER (ALGORITHMS.md §14.2, arXiv 2602.16165) uses ``TurnCritic(heads=3)``: one head per value,
(low, high, term); high and term read at the last prompt token like V(s_n), low at the last token
of the turn's subgoal (``low_pos``: V(s_t, g_t) sees the subgoal), so its rows run the prompt and
the completion up to there. Each head trains towards its own target where it has one
(``target_mask``: the high head on segment-start rows only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from agentrl.update.batch import TrainBatch, minibatches, model_device
from agentrl.update.shared_prefix import common_prefix, prefix_forward, prefix_order

__all__ = ["TurnCritic", "critic_loss", "turn_values", "CriticStats", "critic_update", "ValueRows", "value_rows"]


class TurnCritic(nn.Module):
    """Backbone + value head: one scalar per turn.

    Args:
        backbone: an HF causal LM (its ``base_model`` gives the last hidden state after the
            final norm) or a bare HF ``...Model``; ``config.hidden_size`` sets the head width.
        top_n_layers: train only the top n decoder layers (``backbone.layers``), the final
            norm and the head; the embeddings and the layers below are frozen
            (``requires_grad`` False). None: every parameter trains.
        heads: value heads (1: turn-PPO's V(s_n); 3: HiPER's low, high, term).
    Raises:
        ValueError: ``top_n_layers`` < 1, above the number of layers, or the backbone has no
            ``layers`` list (set ``update.critic_top_n_layers: null``); ``heads`` not 1 or 3.
    Shape:
        prompt_values(input_ids (B, T) int64, attention_mask (B, T), last (B,) int64) →
        values (B,) float32 — what ``turn_values`` and ``critic_update`` call, on prompts
        (``value_rows``); with 3 heads it also takes ``low`` (B,) int64 and gives (B, 3); forward(input_ids (B, T) int64, attention_mask (B, T), rows (K,)
        int64, positions (K,) int64) → values (K,) float32 reads K values anywhere in a batch.
    """

    def __init__(self, backbone: nn.Module, top_n_layers: int | None = None, heads: int = 1) -> None:
        super().__init__()
        if heads not in (1, 3):
            raise ValueError(f"TurnCritic: heads must be 1 (turn-PPO) or 3 (HiPER's low, high, term), got {heads}")
        self.heads = heads
        self.backbone = getattr(backbone, "base_model", backbone)
        self.head = nn.Linear(self.backbone.config.hidden_size, heads)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        if top_n_layers is not None:
            self._freeze_below(top_n_layers)

    def _freeze_below(self, n: int) -> None:
        layers = getattr(self.backbone, "layers", None)
        if not isinstance(layers, nn.ModuleList):
            raise ValueError(f"{type(self.backbone).__name__} has no `layers` list to keep the top {n} of; "
                             "set update.critic_top_n_layers: null (train the whole critic)")
        if not 1 <= n <= len(layers):
            raise ValueError(f"update.critic_top_n_layers={n} but the critic has {len(layers)} layers")
        trained = {id(p) for m in [*layers[len(layers) - n:], getattr(self.backbone, "norm", nn.Identity())]
                   for p in m.parameters()}
        for p in self.backbone.parameters():
            p.requires_grad_(id(p) in trained)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, rows: torch.Tensor,
                positions: torch.Tensor) -> torch.Tensor:
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
        return self._head(hidden, rows, positions)

    def prompt_values(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, last: torch.Tensor,
                      share_prefix: bool = False, low: torch.Tensor | None = None) -> torch.Tensor:
        """Values of B prompts, read at each one's last token.

        Args:
            input_ids, attention_mask: (B, T) int64, right padded.
            last: (B,) int64, position of each row's last prompt token.
            share_prefix: run the tokens every row shares at the start once and the rows'
                suffixes on its key/value cache (off under gradient checkpointing, which drops
                the cache); each row keeps at least its last token in the suffix.
            low: (B,) int64 (3 heads only), where the low head reads (≥ ``last``); None = ``last``.
        Returns:
            (B,) float32 values, or (B, 3) with 3 heads (in the autograd graph when grad mode is on).
        """
        rows = torch.arange(input_ids.shape[0], device=input_ids.device)
        shared = min(common_prefix(input_ids, attention_mask), int(last.min())) if share_prefix and not \
            getattr(self.backbone, "is_gradient_checkpointing", False) else 0
        if shared >= 1:
            hidden = prefix_forward(self.backbone, input_ids, attention_mask, shared).last_hidden_state
        else:
            hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
        if self.heads == 1:
            return self._head(hidden, rows, last - shared)
        at_last = self._head(hidden, rows, last - shared)  # (B, 3)
        at_low = at_last if low is None else self._head(hidden, rows, low - shared)
        return torch.stack([at_low[:, 0], at_last[:, 1], at_last[:, 2]], dim=1)

    def _head(self, hidden: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        h = hidden[rows, positions]  # (K, H)
        out = self.head(h.to(self.head.weight.dtype)).float()
        return out.squeeze(-1) if self.heads == 1 else out


@dataclass(frozen=True, eq=False)
class ValueRows:
    """The prompts a batch's turns are valued on (U of them for N turns).

    Attributes:
        input_ids, attention_mask: (U, L) int64, each turn's row cut after its last prompt
            token (``TrainBatch.turn_value_pos``), right padded with 0.
        last: (U,) int64 position of each prompt's last token.
        turn_prompt: (N,) int64, the prompt of every turn of the batch.
        low: optional (U,) int64, where HiPER's low head reads (≥ ``last``; the row is cut after it).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    last: torch.Tensor
    turn_prompt: torch.Tensor
    low: torch.Tensor | None = None

    @property
    def num_prompts(self) -> int:
        return int(self.last.shape[0])

    def chunk(self, idx: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, ...]:
        """Prompts ``idx`` (k,) as ``(input_ids, attention_mask, last)`` (plus ``low`` when set) on
        ``device``, padding trimmed to the longest of them."""
        end = self.last if self.low is None else self.low
        length = int(end[idx].max()) + 1
        out = (self.input_ids[idx, :length].to(device), self.attention_mask[idx, :length].to(device),
               self.last[idx].to(device))
        return out if self.low is None else (*out, self.low[idx].to(device))

    def values(self, critic: "TurnCritic", idx: torch.Tensor, device: torch.device, share_prefix: bool) -> torch.Tensor:
        """The critic's values of prompts ``idx``: (k,) or (k, 3)."""
        ids, mask, last, *low = self.chunk(idx, device)
        return critic.prompt_values(ids, mask, last, share_prefix=share_prefix, low=low[0] if low else None)


def value_rows(batch: TrainBatch, distinct: bool = False, low_pos: torch.Tensor | None = None) -> ValueRows:
    """Each turn's prompt (its row up to ``turn_value_pos``, or up to ``low_pos`` when given), for the critic.

    Args:
        batch: a ``TrainBatch`` on the CPU (packed rows hold several turns: each gets its own
            prompt, so a packed batch saves the critic nothing).
        distinct: keep one copy of identical prompts, sorted lexicographically so that
            consecutive prompts share their start (``prefix_order``); False: one prompt per
            turn, in turn order.
        low_pos: optional (N,) int64 row positions (≥ ``turn_value_pos``) where HiPER's low head
            reads; the rows then run up to there.
    Returns:
        ``ValueRows`` with U ≤ N prompts (U = N when not ``distinct``).
    """
    pos = batch.turn_value_pos.long()
    low = None if low_pos is None else torch.maximum(torch.as_tensor(low_pos, dtype=torch.int64), pos)
    end = pos if low is None else low
    n, length = batch.num_turns, int(end.max()) + 1 if batch.num_turns else 1
    cols = torch.arange(length)
    mask = (cols[None, :] <= end[:, None]).long()  # (N, L)
    ids = batch.input_ids[batch.turn_row, :length] * mask
    if not distinct:
        return ValueRows(ids, mask, pos.clone(), torch.arange(n), None if low is None else low.clone())
    keys = np.concatenate([ids.numpy(), pos.numpy()[:, None], end.numpy()[:, None]], axis=1)
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    first = torch.from_numpy(first.astype(np.int64))
    order = prefix_order(ids[first], mask[first])  # distinct prompts, sorted
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel())
    keep = first[order]
    return ValueRows(ids[keep], mask[keep], pos[keep].clone(), rank[torch.from_numpy(inverse.reshape(-1).astype(np.int64))],
                     None if low is None else low[keep].clone())


def critic_loss(values: torch.Tensor, returns: torch.Tensor, old_values: torch.Tensor | None = None,
                value_clip: float | None = None) -> torch.Tensor:
    """Per-turn value loss (K,) → (K,): ``½ (V − R)²``; with ``value_clip`` and
    ``old_values``: ``½ max((V − R)², (V_old + clip(V − V_old, ±value_clip) − R)²)``."""
    loss = (values - returns) ** 2
    if value_clip is not None and old_values is not None:
        v_clip = old_values + (values - old_values).clamp(-value_clip, value_clip)
        loss = torch.maximum(loss, (v_clip - returns) ** 2)
    return 0.5 * loss


@torch.no_grad()
def turn_values(critic: TurnCritic, batch: TrainBatch, micro_batch: int = 4, share_prefix: bool = False,
                low_pos: torch.Tensor | None = None) -> torch.Tensor:
    """V(s_n) for every turn of ``batch``: (N,) float32, or (N, 3) (low, high, term) for a 3-head
    critic with the low head read at ``low_pos`` (N,) row positions (default ``batch.value_low_pos``); ``micro_batch`` prompts per
    forward (``share_prefix``: distinct prompts only, shared prefixes once — see the module docstring)."""
    was_training = critic.training
    critic.eval()
    low_pos = batch.value_low_pos if low_pos is None else low_pos
    rows = value_rows(batch, distinct=share_prefix, low_pos=low_pos)
    out = torch.zeros((rows.num_prompts,) + ((critic.heads,) if critic.heads > 1 else ()), dtype=torch.float32)
    device = model_device(critic)
    try:
        for idx in minibatches(rows.num_prompts, micro_batch):
            out[idx] = rows.values(critic, idx, device, share_prefix).float().cpu()
    finally:
        critic.train(was_training)
    return out[rows.turn_prompt]


@dataclass(frozen=True)
class CriticStats:
    """One critic pass (``critic_update``): ``loss`` (mean over turns), ``grad_norm`` before
    clipping (mean over the pass's steps), ``explained_var`` = 1 − Var(R − V)/Var(R) of the
    pre-step values, ``turns``, ``steps`` (optimizer steps in the pass)."""

    loss: float
    grad_norm: float
    explained_var: float
    turns: int
    steps: int = 1


def critic_update(critic: TurnCritic, optimizer: torch.optim.Optimizer, batch: TrainBatch, *,
                  micro_batch: int = 4, grad_clip: float = 1.0, value_clip: float | None = None,
                  share_prefix: bool = False, minibatch: int = 0, seed: int | None = None,
                  low_pos: torch.Tensor | None = None, target_mask: torch.Tensor | None = None) -> CriticStats:
    """One pass of the critic over ``batch.returns``: an optimizer step per minibatch of
    ``minibatch`` distinct prompts (0 = one step on the whole batch), each on the mean loss over
    the turns valued on its prompts; micro-batches of ``micro_batch`` prompts accumulate with the
    minibatch's turn count, like ``update``.

    Minibatches are consecutive runs of the batch's distinct prompts in sorted order (so they
    keep their shared prefixes), taken in an order shuffled by ``seed`` (None: in sorted
    order) — the same steps on either path. ``share_prefix``: each distinct prompt runs once,
    its loss summed over the turns that have it, and shared prefixes once; otherwise each turn
    runs its own prompt. Both give the same losses, gradients and steps to float rounding.

    A 3-head critic (HiPER) takes ``batch.returns`` / ``batch.old_values`` as (N, 3) (low, high,
    term), ``low_pos`` (N,) int64 row positions of the low head (default ``batch.value_low_pos``) and
    ``target_mask`` (N, 3) bool: a head's loss counts only where it has a target; a turn's loss is
    the sum over its heads.

    Returns:
        ``CriticStats`` of the pass: ``loss`` the mean over all N turns of each turn's loss at
        the values its step started from, ``grad_norm`` the mean over the steps, ``explained_var``
        of those pre-step values, ``steps`` the optimizer steps taken.
    Raises:
        ValueError: ``batch.returns`` is missing (compute turn-level GAE returns first), or
            ``minibatch`` < 0.
    """
    if batch.returns is None:
        raise ValueError("critic_update needs batch.returns (turn-level GAE targets): batch.with_(returns=...)")
    if minibatch < 0:
        raise ValueError(f"critic_update: minibatch must be >= 0 prompts per step (0 = the whole batch), got {minibatch}")
    critic.train()
    n, total, preds, norms = batch.num_turns, 0.0, torch.zeros(batch.returns.shape), []
    device = model_device(critic)
    low_pos = batch.value_low_pos if low_pos is None else low_pos
    distinct = value_rows(batch, distinct=True, low_pos=low_pos)  # the step unit on both paths
    rows = distinct if share_prefix else value_rows(batch, low_pos=low_pos)
    row_distinct = torch.arange(distinct.num_prompts) if share_prefix else distinct.turn_prompt  # rows' prompt → distinct
    chunks = minibatches(distinct.num_prompts, minibatch)
    if seed is not None:
        chunks = [chunks[i] for i in torch.randperm(len(chunks), generator=torch.Generator().manual_seed(seed))]
    local = torch.full((rows.num_prompts,), -1, dtype=torch.int64)
    for chunk in chunks:
        optimizer.zero_grad(set_to_none=True)
        step_rows = torch.nonzero(torch.isin(row_distinct, chunk)).squeeze(-1)
        m = int(torch.isin(rows.turn_prompt, step_rows).sum())
        for i in minibatches(step_rows.numel(), micro_batch):
            idx = step_rows[i]
            v = rows.values(critic, idx, device, share_prefix)  # (k,) or (k, 3)
            local[idx] = torch.arange(idx.numel())
            turns = torch.nonzero(torch.isin(rows.turn_prompt, idx)).squeeze(-1)  # every turn valued on these prompts
            at = local[rows.turn_prompt[turns]].to(device)
            old = None if batch.old_values is None else batch.old_values[turns].to(device)
            each = critic_loss(v[at], batch.returns[turns].to(device), old, value_clip)
            if target_mask is not None:
                each = each * target_mask[turns].to(device)
            loss = each.sum() / m
            loss.backward()
            total += float(loss.detach()) * m / n
            preds[turns] = v.detach()[at].float().cpu()
        params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, grad_clip if grad_clip > 0 else math.inf))
                     if params else 0.0)
        optimizer.step()
    ret = batch.returns if target_mask is None else batch.returns[target_mask.bool()]
    pred = preds if target_mask is None else preds[target_mask.bool()]
    var_r = float(ret.var(unbiased=False)) if ret.numel() > 1 else 0.0
    ev = 1.0 - float((ret - pred).var(unbiased=False)) / var_r if var_r > 0 else float("nan")
    return CriticStats(loss=total, grad_norm=float(np.mean(norms)), explained_var=ev, turns=n, steps=len(norms))

"""Turn-level critic for turn-PPO (arXiv 2512.17008; ALGORITHMS.md §10).

``TurnCritic`` = a transformer backbone + a linear value head. The value of turn n,
V(s_n), is read at the **last prompt token** of that turn (``TrainBatch.turn_value_pos``),
i.e. from the full context before the turn's response (ALGORITHMS.md §10.3, PROPOSED).
The critic is trained on the turn returns of ``agentrl.credit``'s turn-level GAE with an
MSE loss, optionally clipped around the rollout-time values (PPO value clipping).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from agentrl.update.batch import TrainBatch, minibatches, model_device

__all__ = ["TurnCritic", "critic_loss", "turn_values", "CriticStats", "critic_update"]


class TurnCritic(nn.Module):
    """Backbone + value head: one scalar per turn.

    Args:
        backbone: an HF causal LM (its ``base_model`` gives the last hidden state after the
            final norm) or a bare HF ``...Model``; ``config.hidden_size`` sets the head width.
        top_n_layers: train only the top n decoder layers (``backbone.layers``), the final
            norm and the head; the embeddings and the layers below are frozen
            (``requires_grad`` False). None: every parameter trains.
    Raises:
        ValueError: ``top_n_layers`` < 1, above the number of layers, or the backbone has no
            ``layers`` list (set ``update.critic_top_n_layers: null``).
    Shape:
        forward(input_ids (B, T) int64, attention_mask (B, T), rows (K,) int64,
        positions (K,) int64) → values (K,) float32.
    """

    def __init__(self, backbone: nn.Module, top_n_layers: int | None = None) -> None:
        super().__init__()
        self.backbone = getattr(backbone, "base_model", backbone)
        self.head = nn.Linear(self.backbone.config.hidden_size, 1)
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
        h = hidden[rows, positions]  # (K, H)
        return self.head(h.to(self.head.weight.dtype)).float().squeeze(-1)


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
def turn_values(critic: TurnCritic, batch: TrainBatch, micro_batch: int = 4) -> torch.Tensor:
    """V(s_n) for every turn of ``batch``: (N,) float32, ``micro_batch`` rows per forward."""
    was_training = critic.training
    critic.eval()
    out = torch.zeros(batch.num_turns, dtype=torch.float32)
    device = model_device(critic)
    try:
        for rows in minibatches(batch.num_rows, micro_batch):
            mb = batch.select(rows).to(device)
            keep = torch.isin(batch.turn_row, rows)
            out[keep] = critic(mb.input_ids, mb.attention_mask, mb.turn_row, mb.turn_value_pos).float().cpu()
    finally:
        critic.train(was_training)
    return out


@dataclass(frozen=True)
class CriticStats:
    """One critic step: ``loss`` (mean over turns), ``grad_norm`` before clipping,
    ``explained_var`` = 1 − Var(R − V)/Var(R) of the pre-step values, ``turns``."""

    loss: float
    grad_norm: float
    explained_var: float
    turns: int


def critic_update(critic: TurnCritic, optimizer: torch.optim.Optimizer, batch: TrainBatch, *,
                  micro_batch: int = 4, grad_clip: float = 1.0, value_clip: float | None = None) -> CriticStats:
    """One optimizer step of the critic on ``batch.returns`` (mean over all N turns of the
    minibatch; micro-batches accumulate with the global turn count, like ``update``).

    Raises:
        ValueError: ``batch.returns`` is missing (compute turn-level GAE returns first).
    """
    if batch.returns is None:
        raise ValueError("critic_update needs batch.returns (turn-level GAE targets): batch.with_(returns=...)")
    critic.train()
    optimizer.zero_grad(set_to_none=True)
    n, total, preds = batch.num_turns, 0.0, torch.zeros(batch.num_turns)
    device = model_device(critic)
    for rows in minibatches(batch.num_rows, micro_batch):
        mb = batch.select(rows).to(device)
        v = critic(mb.input_ids, mb.attention_mask, mb.turn_row, mb.turn_value_pos)
        loss = critic_loss(v, mb.returns, mb.old_values, value_clip).sum() / n
        loss.backward()
        total += float(loss.detach())
        preds[torch.isin(batch.turn_row, rows)] = v.detach().float().cpu()
    params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, grad_clip if grad_clip > 0 else math.inf)) if params else 0.0
    optimizer.step()
    var_r = float(batch.returns.var(unbiased=False)) if n > 1 else 0.0
    ev = 1.0 - float((batch.returns - preds).var(unbiased=False)) / var_r if var_r > 0 else float("nan")
    return CriticStats(loss=total, grad_norm=grad_norm, explained_var=ev, turns=n)

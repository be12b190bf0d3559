"""The turn-level critic inside the training loop (turn-PPO, arXiv 2512.17008; ALGORITHMS.md §10).

Used by ``agentrl.train`` only when the configured estimator requires the ``value`` column:
before the estimator runs, the critic fills ``TurnTable.value`` with V(s_t) read at the last
prompt token of every turn; after the policy update, the critic makes one pass per epoch
towards the turn-level GAE returns (``agentrl.credit.turn_gae_returns``) — one optimizer step,
or one per ``update.critic_minibatch`` prompts — with optional value clipping around the
rollout-time values. The critic is a separate copy of the policy's model with a
zero-initialised value head (so the policy's weights are never moved by the value loss).
Truncated episodes bootstrap from 0 (V(s_T) of the unseen next state is not computed).
Every checkpoint of the run also holds the critic (``critic.pt``: its trained weights and its
optimizer state), so a resumed turn-PPO run continues the same critic (PITFALLS P7).

HiPER (estimator ``hiper``, ALGORITHMS.md §14.2, arXiv 2602.16165) gets the same critic with three
heads (low, high, term; ``critic_heads``): high and term read at the last prompt token, low at the
last token of the turn's subgoal (``agentrl.train.hiper_spans.low_value_offsets``); they fill
``value_low`` / ``value_high`` / ``value_term`` and step towards HAE's three returns
(``hiper_spans.critic_targets``; the high head on segment-start rows only).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from agentrl.config import Config
from agentrl.credit import get_estimator, turn_gae_returns
from agentrl.train import hiper_spans
from agentrl.types import Episode, TurnTable
from agentrl.update.batch import TrainBatch, build_batch
from agentrl.update.checkpoint import CheckpointError
from agentrl.update.critic import CriticStats, TurnCritic, critic_update, turn_values
from agentrl.update.master_weights import MasterAdamW, needs_master_weights


@dataclass
class Critic:
    """A critic and its optimizer (AdamW at ``update.critic_lr``, weight decay
    ``update.weight_decay``; on float32 masters of its trained weights when they are bf16/fp16,
    ``agentrl.update.master_weights``)."""

    model: TurnCritic
    optimizer: torch.optim.Optimizer


def critic_heads(estimator: str) -> int:
    """Value heads the estimator's critic needs: 1 when it requires ``value`` (turn-PPO), 3 when it
    requires ``value_low`` (HiPER's low, high, term), 0 when it needs no critic. KeyError: unknown name."""
    requires = get_estimator(estimator).requires
    return 1 if "value" in requires else 3 if "value_low" in requires else 0


def make_critic(cfg: Config, device: torch.device | str | None = None) -> Critic:
    """A fresh critic: the policy's model loaded again (``policy.model``, ``policy.dtype``)
    plus a zero-initialised float32 value head (only its top ``update.critic_top_n_layers``
    layers, norm and head train when that is set; in bf16/fp16 they step on float32 masters,
    ``MasterAdamW``), backbone and head on ``device`` (default
    ``policy.device``, resolved like the policy's, so both live on the same device; pass
    the policy model's device to be explicit).

    Raises:
        ConfigError: ``policy.device`` asks for CUDA that is not there (names the fix).
    """
    from transformers import AutoModelForCausalLM

    from agentrl.llm.device import resolve_device
    from agentrl.llm.models import resolve_model

    target = resolve_device(cfg.policy.device if device is None else device)
    backbone = AutoModelForCausalLM.from_pretrained(resolve_model(cfg.policy.model),
                                                    dtype=getattr(torch, cfg.policy.dtype))
    model = TurnCritic(backbone, top_n_layers=cfg.update.critic_top_n_layers,
                       heads=critic_heads(cfg.algorithm.estimator) or 1).to(target)
    trained = [p for p in model.parameters() if p.requires_grad]
    wd = cfg.update.weight_decay
    if needs_master_weights(trained):  # bf16 weights drop updates below ~0.4 % of themselves
        return Critic(model, MasterAdamW(trained, lr=cfg.update.critic_lr, weight_decay=wd))
    return Critic(model, torch.optim.AdamW(trained, lr=cfg.update.critic_lr, weight_decay=wd))


def _all_turns_batch(table: TurnTable, episodes: list[Episode], pad_id: int, heads: int = 1) -> TrainBatch:
    turns = {t.turn_id: t for ep in episodes for t in ep.turns}
    picked = [turns[int(i)] for i in table.turn_id]
    batch = build_batch([t.prompt_ids for t in picked], [t.completion_ids for t in picked],
                        [t.completion_logprobs for t in picked], np.zeros(len(picked)), pad_id=pad_id)
    if heads != 3:
        return batch
    low = batch.turn_value_pos + torch.from_numpy(hiper_spans.low_value_offsets(picked))
    return batch.with_(value_low_pos=low)


def with_values(critic: Critic, table: TurnTable, episodes: list[Episode], pad_id: int,
                micro_batch: int, share_prefix: bool = False) -> tuple[TurnTable, TrainBatch]:
    """``table`` with ``value`` (float64[N], V(s_t) per row) and ``bootstrap_value`` (0) set,
    and the batch of all its turns (row i = table row i) for the critic step.
    ``share_prefix`` (``update.share_prefix``): distinct prompts once, shared prefixes once
    (``agentrl.update.critic``; the same values to float rounding). A 3-head critic (HiPER) sets
    ``value_low`` / ``value_high`` / ``value_term`` instead of ``value``."""
    batch = _all_turns_batch(table, episodes, pad_id, critic.model.heads)
    values = turn_values(critic.model, batch, micro_batch=micro_batch, share_prefix=share_prefix).double().numpy()
    if critic.model.heads == 3:
        return replace(table, value_low=values[:, 0], value_high=values[:, 1], value_term=values[:, 2],
                       bootstrap_value=np.zeros(len(table))), batch
    return replace(table, value=values, bootstrap_value=np.zeros(len(table))), batch


def critic_step(critic: Critic, cfg: Config, table: TurnTable, batch: TrainBatch,
                iteration: int = 0) -> list[CriticStats]:
    """``update.epochs`` critic passes towards the turn-level GAE returns of ``table`` (one
    optimizer step each, or one per ``update.critic_minibatch`` distinct prompts, their order
    shuffled per run seed, iteration and epoch like the policy's minibatches). A 3-head critic
    (HiPER) steps each head towards its HAE return where it has one (``hiper_spans.critic_targets``)."""
    mask = None
    if critic.model.heads == 3:
        returns, keep = hiper_spans.critic_targets(table, cfg.algorithm.kwargs)
        old = np.stack([table.value_low, table.value_high, table.value_term], axis=1)
        mask = torch.from_numpy(keep)
    else:  # the estimator's resolved kwargs (defaults filled at config time) that the GAE shares
        shared = {k: v for k, v in cfg.algorithm.kwargs.items() if k in ("gamma", "lam", "c_inv")}
        returns, old = turn_gae_returns(table, **shared).returns, table.value
    target = batch.with_(returns=torch.as_tensor(returns, dtype=torch.float32),
                         old_values=torch.as_tensor(old, dtype=torch.float32))
    return [critic_update(critic.model, critic.optimizer, target, micro_batch=cfg.update.micro_batch,
                          grad_clip=cfg.update.grad_clip, value_clip=cfg.update.value_clip,
                          share_prefix=cfg.update.share_prefix, minibatch=cfg.update.critic_minibatch,
                          seed=cfg.run.seed * 7_919 + iteration * 101 + epoch, target_mask=mask)
            for epoch in range(cfg.update.epochs)]


CRITIC_FILE = "critic.pt"


def save_critic(folder: str | Path, critic: Critic) -> Path:
    """Write the critic's trained weights (value head included) and optimizer state into
    ``folder/critic.pt`` (a checkpoint folder ``iter_<k>``), atomically. Returns the file."""
    path = Path(folder) / CRITIC_FILE
    weights = {n: p.detach().cpu().clone() for n, p in critic.model.named_parameters() if p.requires_grad}
    tmp = path.with_suffix(".pt.tmp")
    torch.save({"weights": weights, "optimizer": critic.optimizer.state_dict()}, tmp)
    os.replace(tmp, path)
    return path


def load_critic(folder: str | Path, critic: Critic) -> bool:
    """Restore ``save_critic``'s weights and optimizer state from checkpoint ``folder`` into
    ``critic``; False (and a warning: the critic starts afresh) when the folder has no
    ``critic.pt`` — a checkpoint written before critics were saved.

    Raises:
        CheckpointError: the saved weights are not this critic's trained parameters (another
            model or ``update.critic_top_n_layers``); the message names the fix.
    """
    path = Path(folder) / CRITIC_FILE
    if not path.is_file():
        logging.getLogger(__name__).warning("checkpoint %s has no %s (written before critics were checkpointed): "
                                            "the critic starts afresh", folder, CRITIC_FILE)
        return False
    payload = torch.load(path, map_location="cpu", weights_only=False)
    params = {n: p for n, p in critic.model.named_parameters() if p.requires_grad}
    saved = payload["weights"]
    if saved.keys() != params.keys() or any(saved[n].shape != params[n].shape for n in params):
        diff = sorted(set(saved) ^ set(params))[:3] or [n for n in params if saved[n].shape != params[n].shape][:3]
        raise CheckpointError(f"{path} does not match this run's critic (e.g. {diff}); resume with the policy.model "
                              "and update.critic_top_n_layers that wrote it, or start over with --no-resume")
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(saved[n].to(p.dtype))
    try:
        critic.optimizer.load_state_dict(payload["optimizer"])
    except (ValueError, KeyError) as exc:  # AdamW's state into MasterAdamW or back: policy.dtype changed
        raise CheckpointError(f"{path} holds the optimizer state of another critic optimizer ({exc}); resume with the "
                              "policy.dtype that wrote it, or start over with --no-resume") from exc
    return True

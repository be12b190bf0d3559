"""The turn-level critic inside the training loop (turn-PPO, arXiv 2512.17008; ALGORITHMS.md §10;
HiPER's three heads, arXiv 2602.16165, §14.2): the built-in step scorer ``"critic"``.

Served for an estimator that declares ``register_estimator(critic=CriticHeads(...))``
(``agentrl.credit.declarations``): before the estimator runs, the critic fills the declared value
columns — one per head, read at the last prompt token of every turn (the first head at the
declared ``read_offsets`` when given: HiPER's low head after the subgoal); after the policy
update, it makes one pass per epoch towards the declared targets (turn-PPO: the turn-level GAE
returns; HiPER: HAE's three returns, each head on its masked rows) — one optimizer step, or one
per ``update.critic_minibatch`` prompts — with optional value clipping around the rollout-time
values. The critic is a separate copy of the policy's model with zero-initialised value heads (so
the policy's weights are never moved by the value loss). Truncated episodes bootstrap from 0
(V(s_T) of the unseen next state is not computed). Every checkpoint of the run also holds the
critic (``critic.pt``: its trained weights and its optimizer state), so a resumed run continues
the same critic (PITFALLS P7). The trainer never names an estimator here: the declaration says
how many heads, which columns and which targets.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from agentrl.config import Config, ConfigError
from agentrl.credit import EstimatorSpec, get_estimator
from agentrl.credit.declarations import CriticHeads
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
    """Value heads the estimator's declared critic has (1 or 3), 0 when it declares none.
    KeyError: unknown name."""
    decl = get_estimator(estimator).declares.critic
    return 0 if decl is None else decl.heads


def _declared(cfg: Config) -> CriticHeads:
    decl = get_estimator(cfg.algorithm.estimator).declares.critic
    if decl is None:
        raise ConfigError(f"the critic serves an estimator that declares one (register_estimator(critic="
                          f"CriticHeads(...))), but {cfg.algorithm.estimator!r} declares none")
    return decl


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


def _all_turns_batch(table: TurnTable, episodes: list[Episode], pad_id: int, decl: CriticHeads) -> TrainBatch:
    turns = {t.turn_id: t for ep in episodes for t in ep.turns}
    picked = [turns[int(i)] for i in table.turn_id]
    batch = build_batch([t.prompt_ids for t in picked], [t.completion_ids for t in picked],
                        [t.completion_logprobs for t in picked], np.zeros(len(picked)), pad_id=pad_id)
    if decl.read_offsets is None:
        return batch
    first = batch.turn_value_pos + torch.from_numpy(np.asarray(decl.read_offsets(picked), dtype=np.int64))
    return batch.with_(value_low_pos=first)


def with_values(critic: Critic, table: TurnTable, episodes: list[Episode], pad_id: int, micro_batch: int,
                share_prefix: bool = False, decl: CriticHeads | None = None) -> tuple[TurnTable, TrainBatch]:
    """``table`` with the declared value columns (float64[N] each: ``value`` = V(s_t) for turn-PPO;
    ``value_low`` / ``value_high`` / ``value_term`` for HiPER) and ``bootstrap_value`` (0) set, and
    the batch of all its turns (row i = table row i) for the critic step. ``decl``: the estimator's
    ``CriticHeads`` (default: one head filling ``value``). ``share_prefix`` (``update.share_prefix``):
    distinct prompts once, shared prefixes once (``agentrl.update.critic``; the same values to float
    rounding)."""
    decl = decl or CriticHeads(("value",), lambda table, kwargs: (np.zeros((len(table), 1)), None))
    batch = _all_turns_batch(table, episodes, pad_id, decl)
    values = turn_values(critic.model, batch, micro_batch=micro_batch, share_prefix=share_prefix).double().numpy()
    values = values.reshape(len(table), -1)
    columns = {name: values[:, i] for i, name in enumerate(decl.columns)}
    return replace(table, **columns, bootstrap_value=np.zeros(len(table))), batch


def critic_step(critic: Critic, cfg: Config, table: TurnTable, batch: TrainBatch,
                iteration: int = 0) -> list[CriticStats]:
    """``update.epochs`` critic passes towards the declared targets of ``table``
    (``CriticHeads.targets`` with the estimator's resolved ``cfg.algorithm.kwargs``; turn-PPO: the
    turn-level GAE returns), one optimizer step each, or one per ``update.critic_minibatch``
    distinct prompts, their order shuffled per run seed, iteration and epoch like the policy's
    minibatches. A 3-head critic steps each head where its target mask is True.

    Raises:
        ConfigError: the configured estimator declares no critic."""
    decl = _declared(cfg)
    returns, keep = decl.targets(table, cfg.algorithm.kwargs)
    returns = np.asarray(returns, dtype=np.float64).reshape(len(table), decl.heads)
    old = np.stack([getattr(table, c) for c in decl.columns], axis=1)
    mask = None if keep is None else torch.from_numpy(np.asarray(keep, dtype=bool).reshape(len(table), decl.heads))
    if decl.heads == 1:  # one head: (N,) targets, as TurnCritic(heads=1) gives (N,) values
        returns, old = returns[:, 0], old[:, 0]
        mask = None if mask is None else mask[:, 0]
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


class CriticScorer:
    """The critic as the step scorer ``"critic"`` (``agentrl.train.scorers``): ``score`` fills the
    declared value columns (``with_values``), ``learn`` takes ``critic_step`` on the batch ``score``
    built and returns the last pass's ``critic/*`` metrics, ``save`` / ``load`` write and read
    ``critic.pt`` in a checkpoint folder."""

    def __init__(self, critic: Critic, decl: CriticHeads, cfg: Config, pad_id: int) -> None:
        self.critic, self.decl, self.cfg, self.pad_id = critic, decl, cfg, pad_id
        self._batch: TrainBatch | None = None

    @classmethod
    def build(cls, ctx) -> "CriticScorer":
        """The critic of ``ctx.estimator``'s ``CriticHeads`` (``make_critic``); ``ctx``: a
        ``ScorerContext``. Raises ConfigError when the estimator declares no critic."""
        spec: EstimatorSpec = ctx.estimator
        if spec.declares.critic is None:
            raise ConfigError(f"step scorer 'critic': estimator {spec.name!r} declares no critic; declare "
                              "register_estimator(critic=CriticHeads(...)) or drop 'critic' from its scorers")
        return cls(make_critic(ctx.cfg), spec.declares.critic, ctx.cfg, ctx.policy.pad_id)

    def score(self, table: TurnTable, episodes: list[Episode], iteration: int) -> TurnTable:
        """``table`` with the value columns filled (see ``with_values``)."""
        u = self.cfg.update
        table, self._batch = with_values(self.critic, table, episodes, self.pad_id, u.micro_batch, u.share_prefix,
                                         self.decl)
        return table

    def learn(self, table: TurnTable, advantages: np.ndarray, episodes: list[Episode],
              iteration: int) -> dict[str, float]:
        """``critic_step`` towards the declared targets; the last pass's metrics.

        Raises:
            RuntimeError: called before ``score`` on this iteration's table.
        """
        if self._batch is None or self._batch.num_turns != len(table):
            raise RuntimeError("CriticScorer.learn: call score() on the same table first")
        stats = critic_step(self.critic, self.cfg, table, self._batch, iteration)
        self._batch = None
        return {} if not stats else {"critic/loss": stats[-1].loss, "critic/grad_norm": stats[-1].grad_norm,
                                     "critic/explained_var": stats[-1].explained_var,
                                     "critic/steps": stats[-1].steps}

    def save(self, folder: Path) -> None:
        """``save_critic(folder, ...)``."""
        save_critic(folder, self.critic)

    def load(self, folder: Path) -> bool:
        """``load_critic(folder, ...)``."""
        return load_critic(folder, self.critic)

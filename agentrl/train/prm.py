"""OPRL's implicit process reward model as the step scorer ``"prm"`` (arXiv 2509.19199, published
as iStar; ALGORITHMS.md §17.3).

The PRM π_φ is a second LoRA adapter (``"prm"``) on the policy's base model, zero-initialised, so
π_φ is the initial policy until it trains. Every iteration, before the estimator runs
(``score``), it

1. takes one trajectory-level DPO step (``prm_lr`` > 0 and at least one pair): over every
   (success, failure) pair of a task group, ``L = mean −log σ(Q(τ+) − Q(τ−))`` with
   ``Q(τ) = β · Σ_t ℓ_t`` (or the mean over t, ``traj_aggregate``) and
   ``ℓ_t = Σ_tokens log π_φ − log π_θold`` over the turn's completion tokens; π_θold is a
   constant (the trainer's forward with the policy adapter, or the stored behaviour log-probs,
   ``reference``). The gradient is exact under micro-batching: a no-grad pass gives every ℓ_t,
   ∂L/∂ℓ_t follows in closed form, and one forward + backward per micro-batch of
   ``Σ_t (∂L/∂ℓ_t) · log π_φ(turn t)`` accumulates it (``adapters.weighted_backward``);
2. fills ``table.scores["prm_logratio"]`` (float64[N], ℓ_t in nats; 0 on rows of failed
   episodes) with the PRM after its step (``score_after_update``, the paper) or before it (the
   released code's single forward).

With ``prm_lr: 0`` the PRM never changes: the released code's behaviour (§17.2: its DPO loss is
computed on detached log-ratios, so no gradient reaches the PRM). Only the ``prm`` adapter's
parameters get gradients; the policy adapter is untouched (its ``requires_grad`` is off inside
the PRM's block, ``adapters.use_adapter``). ``save`` / ``load`` keep the adapter's weights, its
AdamW state and the step count in ``prm.pt`` of every checkpoint folder.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from pathlib import Path

import numpy as np
import torch

from agentrl.config import Config, ConfigError
from agentrl.train.adapters import (POLICY_ADAPTER, add_adapter, named_adapter_parameters, row_logprobs, row_sums,
                                    turns_batch, use_adapter, weighted_backward)
from agentrl.train.scorer_options import PRMOptions
from agentrl.types import Episode, TurnTable

__all__ = ["PRMScorer", "PRM_COLUMN", "PRM_FILE", "dpo_pairs", "trajectory_values", "dpo_loss"]

#: the column OPRL reads (``TurnTable.scores``).
PRM_COLUMN = "prm_logratio"
#: the batch's largest |ℓ| over its ok, trainable rows (the same on every row): OPRL's batch scale then
#: holds for a sub-table too (``agentrl.credit.oprl.PEAK_COLUMN``; the trainer never imports an estimator).
PEAK_COLUMN = "prm_batch_absmax"
#: the PRM's state in a checkpoint folder.
PRM_FILE = "prm.pt"
ADAPTER = "prm"


def dpo_pairs(table: TurnTable, threshold: float = 0.0) -> list[tuple[int, int]]:
    """Every (success, failure) pair of episodes inside one task group (§17.3):
    ``EpReward(τ+) > threshold ≥ EpReward(τ−)``, both ``episode_ok``; EpReward = the sum of the
    episode's rewards. Returns ``(episode id τ+, episode id τ−)`` pairs, sorted."""
    ok = table.episode_ok
    ret: dict[int, float] = {}
    group: dict[int, int] = {}
    for e, g, r in zip(table.episode[ok].tolist(), table.group[ok].tolist(), table.reward[ok].tolist()):
        ret[e] = ret.get(e, 0.0) + r
        group[e] = g
    pairs = []
    for pos in sorted(ret):
        if ret[pos] > threshold:
            pairs += [(pos, neg) for neg in sorted(ret) if group[neg] == group[pos] and ret[neg] <= threshold]
    return pairs


def trajectory_values(ell: np.ndarray, episode: np.ndarray, beta: float, aggregate: str = "sum") -> dict[int, float]:
    """``{episode id: Q(τ)}``, ``Q(τ) = β · Σ_t ℓ_t`` (``aggregate`` "sum", the paper) or
    ``β · mean_t ℓ_t`` ("mean", the released code), over the rows of each episode.

    Args:
        ell: float64[R] log-ratios ℓ_t (nats). episode: int64[R] each row's episode id.
    Raises:
        ValueError: unknown ``aggregate``.
    """
    if aggregate not in ("sum", "mean"):
        raise ValueError(f"traj_aggregate must be 'sum' or 'mean', got {aggregate!r}")
    out = {}
    for e in np.unique(episode):
        v = ell[episode == e]
        out[int(e)] = float(beta * (v.sum() if aggregate == "sum" else v.mean()))
    return out


def dpo_loss(ell: np.ndarray, episode: np.ndarray, pairs: list[tuple[int, int]], beta: float,
             aggregate: str = "sum") -> tuple[float, np.ndarray]:
    """The trajectory-level DPO loss ``L = (1/|P|) Σ −log σ(Q(τ+) − Q(τ−))`` (§17.3) and its
    gradient with respect to each row's ℓ_t (float64[R], 0 on rows of unpaired episodes).

    Args:
        ell, episode: as ``trajectory_values``; pairs: ``dpo_pairs``'s (τ+, τ−) (non-empty).
    Raises:
        ValueError: no pair, or a pair names an episode without rows.
    """
    if not pairs:
        raise ValueError("dpo_loss needs at least one (success, failure) pair")
    q = trajectory_values(ell, episode, beta, aggregate)
    missing = sorted({e for p in pairs for e in p} - set(q))
    if missing:
        raise ValueError(f"dpo_loss: paired episode(s) {missing[:3]} have no rows")
    d_q: dict[int, float] = {}
    total = 0.0
    for pos, neg in pairs:
        margin = q[pos] - q[neg]
        total += float(np.logaddexp(0.0, -margin))  # −log σ(margin), stable
        g = -1.0 / (1.0 + np.exp(margin)) / len(pairs)  # ∂(−log σ(m))/∂m = −σ(−m)
        d_q[pos] = d_q.get(pos, 0.0) + g
        d_q[neg] = d_q.get(neg, 0.0) - g
    grad = np.zeros(len(ell))
    for e, g in d_q.items():
        rows = episode == e
        grad[rows] = g * beta / (1.0 if aggregate == "sum" else rows.sum())
    return total / len(pairs), grad


class PRMScorer:
    """The step scorer ``"prm"`` (see the module docstring); build it with ``PRMScorer.build``.

    Attributes:
        params: the ``prm`` adapter's parameters (the only ones its optimizer steps).
        optimizer: AdamW over them, None when ``prm_lr`` is 0 (the PRM never trains).
        adapter: the peft adapter's name (``"prm"``; a study may hold a second one beside it).
        steps: PRM optimizer steps taken so far (restored on resume).
    """

    def __init__(self, model: torch.nn.Module, renderer, pad_id: int, opts: PRMOptions, beta: float, lr: float,
                 micro_batch: int, adapter: str = ADAPTER, share_prefix: bool = False) -> None:
        self.model, self.renderer, self.pad_id, self.opts = model, renderer, pad_id, opts
        self.beta, self.lr, self.micro_batch, self.adapter = float(beta), float(lr), int(micro_batch), adapter
        self.share_prefix = bool(share_prefix)
        self.params = add_adapter(model, adapter, "OPRL's PRM (step scorer 'prm')")
        self.optimizer = (torch.optim.AdamW(self.params, lr=self.lr, weight_decay=opts.prm_weight_decay)
                          if self.lr > 0 else None)
        self.steps = 0
        self._metrics: dict[str, float] = {}

    @classmethod
    def build(cls, ctx) -> "PRMScorer":
        """From a ``ScorerContext``: options ``ctx.options`` (``PRMOptions``), β =
        ``algorithm.kwargs.beta`` (0.05 when the estimator has none), ``prm_lr`` null → 2 × ``update.lr``.

        Raises:
            ConfigError: a fully fine-tuned policy (``adapters.add_adapter``)."""
        cfg: Config = ctx.cfg
        opts = ctx.options if ctx.options is not None else PRMOptions()
        lr = 2.0 * cfg.update.lr if opts.prm_lr is None else opts.prm_lr
        if opts.reference == "stored" and cfg.policy.temperature != 1.0:
            raise ConfigError(f"algorithm.scorers.prm.reference: stored takes π_old from the behaviour log-probs, sampled "
                              f"at policy.temperature {cfg.policy.temperature}, but the PRM scores at temperature 1 "
                              "(§17.3); use reference: trainer")
        beta = cfg.algorithm.kwargs.get("beta", 0.05)
        if not isinstance(beta, (int, float)) or beta < 0:
            raise ConfigError(f"step scorer 'prm' reads algorithm.kwargs.beta as its DPO β; got {beta!r}")
        return cls(ctx.policy.model, ctx.policy.renderer, ctx.policy.pad_id, opts, beta, lr,
                   opts.micro_batch or cfg.update.micro_batch, share_prefix=cfg.update.share_prefix)

    def _prm_sums(self, batch) -> np.ndarray:
        with use_adapter(self.model, self.adapter):
            return row_sums(row_logprobs(self.model, batch, self.micro_batch, self.share_prefix), batch)

    def score(self, table: TurnTable, episodes: list[Episode], iteration: int) -> TurnTable:
        """The DPO step (when it trains and the batch has a pair), then ``table`` with
        ``scores["prm_logratio"]`` filled (module docstring)."""
        t0 = time.perf_counter()
        ok = np.flatnonzero(table.episode_ok)
        out = np.zeros(len(table))
        self._metrics = {"prm/pairs": 0.0, "prm/steps": float(self.steps)}
        if ok.size == 0:
            return dataclasses.replace(table, scores={**table.scores, PRM_COLUMN: out, PEAK_COLUMN: out.copy()})
        turns = {t.turn_id: t for ep in episodes for t in ep.turns}
        batch = turns_batch([turns[int(i)] for i in table.turn_id[ok]], self.renderer, self.pad_id)
        if self.opts.reference == "trainer":  # the same rows and micro-batches as every PRM pass: ℓ is
            with use_adapter(self.model, POLICY_ADAPTER):  # exactly 0 while both adapters are at init
                ref = row_sums(row_logprobs(self.model, batch, self.micro_batch, self.share_prefix), batch)
        else:
            ref = np.array([float(np.asarray(turns[int(i)].completion_logprobs, np.float64).sum())
                            for i in table.turn_id[ok]])
        episode = table.episode[ok]
        pairs = dpo_pairs(table, self.opts.success_threshold)
        paired = np.isin(episode, [e for p in pairs for e in p])
        stepping = self.optimizer is not None and bool(pairs)
        ell = self._prm_sums(batch) - ref  # before the step: the loss, its gradient, the released code's scores
        rows_fwd, rows_bwd = (2 if self.opts.reference == "trainer" else 1) * ok.size, 0
        if pairs:
            loss, grad = dpo_loss(ell[paired], episode[paired], pairs, self.beta, self.opts.traj_aggregate)
            self._metrics.update({"prm/pairs": float(len(pairs)), "prm/loss": loss})
        if stepping:
            self._step(batch, paired, grad)
            rows_bwd = int(paired.sum())
            if self.opts.score_after_update:
                ell = self._prm_sums(batch) - ref
                rows_fwd += ok.size
                self._metrics["prm/loss_after"] = dpo_loss(ell[paired], episode[paired], pairs, self.beta,
                                                           self.opts.traj_aggregate)[0]
        out[ok] = ell
        elig = table.episode_ok & table.trainable  # the batch's max |ℓ| for OPRL's batch scale (a viewer's sub-table)
        peak = np.full(len(table), float(np.abs(out[elig]).max()) if elig.any() else 0.0)
        self._metrics.update({"prm/steps": float(self.steps), "prm/logratio_abs_mean": float(np.abs(ell).mean()),
                              "prm/forward_rows_per_turn": rows_fwd / ok.size,
                              "prm/backward_rows_per_turn": rows_bwd / ok.size,
                              "prm/seconds": time.perf_counter() - t0})
        return dataclasses.replace(table, scores={**table.scores, PRM_COLUMN: out, PEAK_COLUMN: peak})

    def _step(self, batch, paired: np.ndarray, grad: np.ndarray) -> None:
        """One AdamW step of the PRM adapter along ∂L/∂ℓ (``grad`` on the ``paired`` rows)."""
        weights = np.zeros(batch.num_rows)
        weights[paired] = grad
        with use_adapter(self.model, self.adapter):
            self.optimizer.zero_grad(set_to_none=True)
            weighted_backward(self.model, batch, weights, self.micro_batch, self.share_prefix)
            clip = self.opts.prm_grad_clip if self.opts.prm_grad_clip > 0 else float("inf")
            norm = torch.nn.utils.clip_grad_norm_(self.params, clip)
            self.optimizer.step()
        self.steps += 1
        self._metrics["prm/grad_norm"] = float(norm)

    def learn(self, table: TurnTable, advantages: np.ndarray, episodes: list[Episode],
              iteration: int) -> dict[str, float]:
        """Nothing to learn after the policy update (the PRM stepped in ``score``, before scoring,
        the paper's order); returns this iteration's ``prm/*`` metrics: pairs, loss (before the
        step) and loss_after, grad_norm, steps, mean |ℓ|, forward/backward rows per turn, seconds."""
        return dict(self._metrics)

    def save(self, folder: Path) -> None:
        """Write the adapter's weights, AdamW state and step count to ``folder/prm.pt`` (atomically)."""
        payload = {"weights": {n: p.detach().cpu().clone()
                               for n, p in named_adapter_parameters(self.model, self.adapter).items()},
                   "optimizer": None if self.optimizer is None else self.optimizer.state_dict(), "steps": self.steps}
        path = Path(folder) / PRM_FILE
        tmp = path.with_suffix(".pt.tmp")
        torch.save(payload, tmp)
        os.replace(tmp, path)

    def load(self, folder: Path) -> bool:
        """Restore ``save``'s state; False (with a warning: the PRM starts afresh) without ``prm.pt``.

        Raises:
            ConfigError: the saved adapter does not match this model's ``prm`` adapter (another
                model or LoRA config), or an optimizer state saved with another ``prm_lr`` (0 vs > 0).
        """
        path = Path(folder) / PRM_FILE
        if not path.is_file():
            logging.getLogger(__name__).warning("checkpoint %s has no %s: OPRL's PRM starts afresh", folder, PRM_FILE)
            return False
        payload = torch.load(path, map_location="cpu", weights_only=False)
        own = named_adapter_parameters(self.model, self.adapter)
        saved = payload["weights"]
        if saved.keys() != own.keys() or any(saved[n].shape != own[n].shape for n in own):
            raise ConfigError(f"{path} does not match this run's PRM adapter (policy.model / policy.lora changed); "
                              "resume with the settings that wrote it, or start over with --no-resume")
        if (payload["optimizer"] is None) != (self.optimizer is None):
            raise ConfigError(f"{path} was written with prm_lr {'0' if payload['optimizer'] is None else '> 0'}; "
                              "resume with the same algorithm.scorers.prm.prm_lr")
        with torch.no_grad():
            for n, p in own.items():
                p.copy_(saved[n].to(p.dtype))
        if self.optimizer is not None:
            self.optimizer.load_state_dict(payload["optimizer"])
        self.steps = int(payload["steps"])
        return True

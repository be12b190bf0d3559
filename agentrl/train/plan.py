"""The update phase of an iteration, used by ``agentrl.train``: which turns train
(``plan_update``: finished episodes, trainable turns, non-zero advantages, with their exact
tokens), in which minibatches (the estimator's update order, or seeded shuffles), and the
optimizer steps over them (``update_policy``), data-parallel or not.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch

from agentrl.config import Config, UpdateConfig
from agentrl.config.schedule import scheduled_kwargs
from agentrl.credit import get_estimator, update_groups
from agentrl.credit.registry import prepare_table
from agentrl.distributed import DistContext
from agentrl.llm.constrained import constraint_masks
from agentrl.llm.grammar import grammar_masks
from agentrl.llm.policy import Policy
from agentrl.types import Episode, EpisodeStatus, Turn, TurnTable
from agentrl.update.audit import CreditAudit, TurnExpectation
from agentrl.update.batch import TrainBatch, build_batch, minibatches, pack_chains
from agentrl.update.correction import Correction, apply_rollout_correction
from agentrl.update.step import update

log = logging.getLogger(__name__)

__all__ = ["BatchInputs", "UpdatePlan", "require_tokens", "plan_update", "expectations", "skipped_update_reason",
           "report_failures", "RolloutFailedError",
           "update_policy"]


@dataclass(frozen=True)
class BatchInputs:
    """The trained turns of an update phase as ragged arrays: what ``build_batch`` takes.

    Attributes:
        prompt_ids / completion_ids: per turn int arrays (P_i,) / (C_i,), exactly as sampled.
        logprobs: per turn float32 (C_i,) behaviour logprobs.
        advantages: float64[N], one per turn, or per turn float64 (C_i,) per-token advantages (an
            estimator that declares ``spans``, e.g. HiPER's).
        allowed / grammar: per turn constrained-decoding ids / grammar masks, or None.
        episodes: int[N], each turn's episode id.
        pad_id / pack: as ``build_batch``.
        token_mask: per turn None or bool (C_i,), the completion tokens that train (the union of a
            span estimator's spans); None: all of them.
        turn_keys: int[N], each turn's store turn id (``TrainBatch.turn_key``, for the audit).
    """

    prompt_ids: list
    completion_ids: list
    logprobs: list
    advantages: np.ndarray | list
    allowed: list | None
    grammar: list | None
    episodes: list[int]
    pad_id: int
    pack: bool
    token_mask: list | None = None
    turn_keys: list | None = None

    def build(self) -> TrainBatch:
        """The padded ``TrainBatch`` (``agentrl.update.batch.build_batch``)."""
        return build_batch(self.prompt_ids, self.completion_ids, self.logprobs, self.advantages, pad_id=self.pad_id,
                           pack=self.pack, allowed=self.allowed, episodes=self.episodes, grammar=self.grammar,
                           token_mask=self.token_mask, turn_keys=self.turn_keys)


@dataclass(frozen=True)
class UpdatePlan:
    """The optimizer steps of one update phase: the trained turns (``BatchInputs``: ragged
    token arrays, not a padded batch) and, per epoch, the row indices (int64 tensors) of each
    minibatch, in order. Built on rank 0 and broadcast, so every data-parallel rank builds the
    same batch itself and takes the same steps over the same minibatches. ``expected``: what the
    credit audit checks each trained turn against (``agentrl.update.audit``; keyed by turn id)."""

    inputs: BatchInputs
    epochs: list[list[torch.Tensor]]
    expected: dict[int, TurnExpectation]


def require_tokens(episodes: list[Episode]) -> None:
    """Refuse to train on turns without the exact sampled tokens.

    A turn meant for training (``info["trainable"]`` not False, e.g. not a proxy-aborted call)
    of a finished episode must carry ``prompt_ids``, ``completion_ids`` and one behaviour
    logprob per completion id: agentrl never re-tokenizes text for an update (the tokens
    would not be the ones sampled; PITFALLS P1).

    Raises:
        ValueError: naming the first such turn, how many there are, and the fix.
    """
    bad = [(ep, t) for ep in episodes if ep.status == EpisodeStatus.OK for t in ep.turns
           if t.info.get("trainable", True)
           and (not t.has_tokens or t.completion_logprobs.size != t.completion_ids.size)]
    if bad:
        ep, t = bad[0]
        what = ("no token ids (a text-only turn)" if not t.has_tokens else
                f"{t.completion_ids.size} completion ids but {t.completion_logprobs.size} logprobs")
        raise ValueError(
            f"{len(bad)} turn(s) to train on lack their sampled tokens, first: episode {ep.episode_id} "
            f"t={t.t} has {what}; train only on turns recorded with exact token ids and logprobs "
            f"(an agentrl engine, the recording proxy, or a server that returns token_ids and logprobs)")


def plan_update(policy: Policy, cfg: Config, table: TurnTable, advantages: np.ndarray, episodes: list[Episode],
                iteration: int) -> UpdatePlan | None:
    """``update.epochs`` passes over the trainable rows with a non-zero advantage (None when
    there is none).

    An estimator that declares ``spans`` (``agentrl.credit.declarations.SpanAdvantages``, e.g.
    HiPER's action, subgoal and switch spans) gives each trained turn's spans their own advantage,
    and only those tokens train.
    Minibatches follow the estimator's update groups when it defines an order (RTPO's
    reverse-turn ``update_order``: one group per branch, latest branch point first);
    otherwise they are shuffled chunks of ``update.minibatch`` rows.
    """
    require_tokens(episodes)
    turns = {t.turn_id: t for ep in episodes for t in ep.turns}
    rows = np.flatnonzero(table.episode_ok & table.trainable & (advantages != 0.0))
    if rows.size == 0:
        return None
    picked = [turns[int(i)] for i in table.turn_id[rows]]
    adv, token_mask = advantages[rows], None
    spans = get_estimator(cfg.algorithm.estimator).declares.spans
    if spans is not None:  # each span its own advantage (HiPER: D-14a)
        ran_on = prepare_table(table, cfg.algorithm.estimator, cfg.algorithm.group_by_version)  # the estimator's table
        adv, token_mask = spans.token_advantages(ran_on, rows, picked,
                                                 scheduled_kwargs(cfg.algorithm.kwargs, cfg.algorithm.schedule, iteration))
    keys = [int(k) for k in table.turn_id[rows]]
    inputs = BatchInputs([t.prompt_ids for t in picked], [t.completion_ids for t in picked],
                         [t.completion_logprobs for t in picked], adv,
                         constraint_masks(picked, policy.renderer), grammar_masks(picked, policy.renderer),
                         [t.episode_id for t in picked], policy.pad_id, cfg.update.pack, token_mask, keys)
    n_rows = len(pack_chains(inputs.prompt_ids, inputs.completion_ids)) if cfg.update.pack else len(picked)
    groups = update_groups(cfg.algorithm.estimator, table, rows)
    epochs = [groups if groups is not None else minibatches(
        n_rows, cfg.update.minibatch, seed=cfg.run.seed * 7_919 + iteration * 101 + epoch)
        for epoch in range(cfg.update.epochs)]
    return UpdatePlan(inputs, epochs, expectations(picked, keys, adv, token_mask))


def expectations(turns: list[Turn], keys: list[int], advantages: np.ndarray | list,
                 token_mask: list | None) -> dict[int, TurnExpectation]:
    """The credit audit's ``{turn id: TurnExpectation}`` of the trained turns: each turn's own
    prompt length and completion ids, and the estimator's advantage of each of its tokens
    (``advantages``: float64[R] per row, or R per-token arrays for a span estimator) with the
    tokens it trains (``token_mask``: R bool arrays or None, None = all)."""
    out = {}
    for i, (turn, key) in enumerate(zip(turns, keys)):
        c = turn.completion_ids.size
        adv = np.broadcast_to(np.asarray(advantages[i], dtype=np.float64), (c,)).copy()
        mask = token_mask[i] if token_mask is not None else None
        trained = np.ones(c, dtype=bool) if mask is None else np.asarray(mask, dtype=bool).reshape(-1)
        out[key] = TurnExpectation(int(turn.episode_id), int(turn.prompt_ids.size),
                                   np.asarray(turn.completion_ids, dtype=np.int64), adv, trained)
    return out


def failure_summary(episodes: list[Episode]) -> str:
    """``"aborted 8 of 8; most common reason (8): <error>"``: the failed episodes' statuses, counted,
    and their most common error ("" when none failed)."""
    failed = [e for e in episodes if e.status != EpisodeStatus.OK]
    if not failed:
        return ""
    by_status = Counter(e.status.value for e in failed)
    reason, n = Counter(e.error or "no reason recorded" for e in failed).most_common(1)[0]
    counts = ", ".join(f"{k} {v}" for k, v in by_status.most_common())
    return f"{counts} of {len(episodes)}; most common reason ({n}): {reason}"


class RolloutFailedError(RuntimeError):
    """Every episode of an iteration failed (aborted, timeout or env_error): the run stops with
    the first error (``agentrl train`` exits 1) instead of training on nothing and writing a
    checkpoint of an unchanged policy. The episodes stay in the store."""


def report_failures(episodes: list[Episode], iteration: int, *, stop_when_all: bool = True) -> str:
    """Log one warning line when episodes of iteration ``iteration`` (0-based) failed: how many
    of how many, by status and by cause (``Episode.cause``), and the first failed episode's
    error; returns that line ("" when none failed).

    Raises:
        RolloutFailedError: every episode failed (with ``stop_when_all``; a data-parallel run
            passes False: its other ranks would wait on rank 0 in the next collective).
    """
    failed = [e for e in episodes if e.status != EpisodeStatus.OK]
    if not failed:
        return ""
    statuses = ", ".join(f"{k} {v}" for k, v in Counter(e.status.value for e in failed).most_common())
    causes = Counter(e.cause for e in failed if e.cause)
    named = ", ".join(f"{k} {v}" for k, v in causes.most_common()) or "none named"
    first = min(failed, key=lambda e: e.episode_id)
    detail = (f"{len(failed)} of {len(episodes)} episode(s) failed ({statuses}; causes: {named}); first error "
              f"(episode {first.episode_id}): {first.error or 'no reason recorded'}")
    log.warning("iteration %d: %s", iteration + 1, detail)
    if stop_when_all and len(failed) == len(episodes):
        raise RolloutFailedError(f"every episode of iteration {iteration + 1} failed, so nothing can be trained: "
                                 f"{detail}. Fix the cause and run the same command again (the failed episodes are "
                                 "in the store: agentrl view)")
    return f"iteration {iteration + 1}: {detail}"


def skipped_update_reason(table: TurnTable | None, advantages: np.ndarray | None,
                          episodes: list[Episode] | None = None) -> str:
    """Why ``plan_update`` found no row to train on (a phrase for the log line): no episode (or
    none with a turn: the failed ones' statuses and most common reason, ``failure_summary``),
    every episode failed, no turn with tokens, or every advantage 0 (no contrast inside any
    group: e.g. all episodes of each group scored the same)."""
    failures = failure_summary(list(episodes or []))
    if table is None or len(table) == 0:
        return f"no episode has a turn ({failures})" if failures else "no episode was collected"
    if not table.episode_ok.any():
        return (f"every episode failed ({len(np.unique(table.episode))} episode(s); see their status in the store"
                + (f"; {failures})" if failures else ")"))
    if not (table.episode_ok & table.trainable).any():
        return "no finished turn carries token ids to train on"
    groups = len(np.unique(table.group[table.episode_ok & table.trainable]))
    return (f"every advantage is 0: no contrast inside any of the {groups} group(s) (every episode of a group "
            f"scored the same); larger groups or an easier task split give some")


def probes_sampler(ucfg: UpdateConfig, iteration: int) -> bool:
    """Whether the update phase of ``iteration`` (0-based) runs ``apply_rollout_correction``:
    always for a correcting mode; for ``none``, on iterations 0, k, 2k, ... of
    ``update.sampler_kl_every`` k (never for 0)."""
    k = ucfg.sampler_kl_every
    return ucfg.rollout_correction not in ("auto", "none") or (k > 0 and iteration % k == 0)


def update_policy(policy: Policy, optimizer: torch.optim.Optimizer, cfg: Config, table: TurnTable | None,
                  advantages: np.ndarray | None, episodes: list[Episode], iteration: int,
                  dp: DistContext | None = None) -> tuple[list, Correction | None, dict[str, float]]:
    """Run the steps of ``plan_update``; returns their UpdateStats, the off-policy
    correction of the phase (``update.rollout_correction``; its KL is measured for ``none``
    too; None when no step was taken or the phase skips the probe, ``probes_sampler``) and
    the credit audit's metrics (``audit/rows``, ``audit/tokens``, ``audit/seconds``; {} with
    ``update.audit: false`` or no step): with
    ``update.audit`` every micro-batch is checked before its loss (``agentrl.update.audit``;
    CreditAuditError on a misplaced advantage).

    ``dp`` (data-parallel runs): rank 0 plans from its ``table``/``advantages``/``episodes``
    and broadcasts the plan (ragged token arrays and row indices); the other ranks pass None
    for those, receive it and build the same batch; each step then trains every rank's share
    of the minibatch (``agentrl.update.step.update``). The correction recomputes π_old once
    per phase, each rank its share of the rows, all-gathered
    (``agentrl.update.row_shards.sharded_batch_logprobs``).
    """
    main = dp is None or dp.is_main
    plan = plan_update(policy, cfg, table, advantages, episodes, iteration) if main else None
    if dp is not None:
        plan = dp.broadcast_object(plan)
    if plan is None:
        if main:
            log.warning("iteration %d: no update, %s; the policy is unchanged", iteration + 1,
                        skipped_update_reason(table, advantages, episodes))
        return [], None, {}
    batch = plan.inputs.build()
    if main:
        log.info("iteration %d: update on %d turn(s) in %d optimizer step(s)", iteration + 1, batch.num_turns,
                 sum(len(chunks) for chunks in plan.epochs))
    corr = None
    if probes_sampler(cfg.update, iteration):
        batch, corr = apply_rollout_correction(policy.model, batch, cfg.update, temperature=1.0, dp=dp)
    audit = CreditAudit(plan.expected) if cfg.update.audit else None
    stats = [update(policy.model, optimizer, batch.select(chunk), cfg.update, temperature=1.0, dp=dp, audit=audit)
             for chunks in plan.epochs for chunk in chunks]
    return stats, corr, {} if audit is None else audit.as_metrics()

"""The pieces of one training iteration, used by ``agentrl.train``: the rollout of an
iteration (chains, Tree-GRPO trees or external-harness episodes), the policy update over the
trained rows (in the estimator's update order), and RTPO's interleaved reverse-turn rounds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import numpy as np
import torch

from agentrl.config import Config, ConfigError
from agentrl.credit import check_success_reward, compute_advantages, update_groups
from agentrl.distributed import DistContext, inference_state
from agentrl.eval import env_kwargs, loop_config
from agentrl.llm.base import SamplingParams
from agentrl.llm.constrained import constraint_masks
from agentrl.llm.grammar import grammar_masks
from agentrl.llm.policy import Policy
from agentrl.rollout.collector import CollectConfig, collect
from agentrl.rollout.engine_stream import EngineStream
from agentrl.rollout.engine_worker import EngineSpec, EngineWorkers, open_engine_workers
from agentrl.rollout.harness import HarnessSpec, collect_harness_episodes
from agentrl.rollout.ray_backend import make_env_pool
from agentrl.rollout.reverse import RtpoRound, run_rtpo_iteration
from agentrl.rollout.tree import add_linked, sample_trees
from agentrl.store import TurnStore
from agentrl.train.colocate import engine_asleep
from agentrl.types import Episode, EpisodeStatus, TurnTable
from agentrl.update.batch import TrainBatch, build_batch, minibatches
from agentrl.update.correction import Correction, apply_rollout_correction
from agentrl.update.lora import inference_state_dict
from agentrl.update.step import update

log = logging.getLogger(__name__)


def collect_config(cfg: Config, iteration: int) -> CollectConfig:
    """The ``CollectConfig`` of one iteration (see ``collect_iteration`` for the seeds)."""
    r = cfg.rollout
    base = cfg.run.seed * 1_000_003 + iteration * r.groups_per_iteration
    sampling = SamplingParams(temperature=cfg.policy.temperature, top_p=cfg.policy.top_p,
                              max_tokens=cfg.policy.max_tokens, seed=base)
    cc = CollectConfig(env_id=cfg.env.id, n_groups=r.groups_per_iteration, group_size=r.group_size, seed=base,
                       loop=loop_config(cfg), sampling=sampling, env_kwargs=env_kwargs(cfg, cfg.env.split),
                       num_workers=r.num_workers, step_timeout_s=r.step_timeout_s, max_batch=cfg.policy.max_batch,
                       return_hidden=cfg.policy.return_hidden, run_id=cfg.run.name, progress=cfg.log.console)
    return cc


def open_pool(cfg: Config):
    """The env pool that chain rollouts of ``cfg`` play on (one slot per episode of an
    iteration); the trainer keeps it open across iterations (opening one costs seconds:
    worker processes, env imports, game loading). Close it with ``.close()``."""
    r, cc = cfg.rollout, collect_config(cfg, 0)
    return make_env_pool(r.backend, cc.env_id, cc.num_slots or cc.n_episodes, env_kwargs=cc.env_kwargs,
                         num_workers=cc.num_workers, step_timeout_s=cc.step_timeout_s)


def open_engines(cfg: Config, policy: Policy) -> EngineWorkers:
    """The run's ``rollout.engines`` engine workers (``rollout.backend``: local processes or Ray
    actors), started with the trainer's current inference weights and policy version; the
    trainer keeps them for the whole run. Close them with ``.close()``.

    Raises:
        ConfigError: ``policy.engine`` is not ``hf`` (the workers run HF engines).
        EngineWorkerError: a worker failed to start.
    """
    from agentrl.llm.models import resolve_model

    if cfg.policy.engine != "hf":
        raise ConfigError(f"rollout.engines={cfg.rollout.engines} runs HF engine workers; set policy.engine: hf "
                          "(or rollout.engines: 0 to sample with the in-process engine)")
    spec = EngineSpec(model=str(resolve_model(cfg.policy.model)), dtype=cfg.policy.dtype, device=cfg.policy.device,
                      num_threads=cfg.policy.num_threads, max_context=policy.engine.max_context,
                      prefix_cache_mb=cfg.policy.prefix_cache_mb, decode_attention=cfg.policy.decode_attention)
    # a data-parallel run's trainer is sharded: start the workers from rank 0's synced engine copy
    weights = inference_state_dict(policy.model) if policy.shares_weights else dict(policy.engine.model.state_dict())
    return open_engine_workers(cfg.rollout.backend, cfg.rollout.engines, spec, weights, policy.engine.policy_version)


def production_config(cfg: Config, k: int) -> CollectConfig:
    """Production ``k`` of an asynchronous run (``rollout.max_staleness`` ≥ 1): iteration k's
    ``collect_config`` with the episode and group ids the synchronous loop gives them, no
    progress bar (the workers play it while the trainer updates)."""
    r = cfg.rollout
    return replace(collect_config(cfg, k), id_offset=k * r.groups_per_iteration * r.group_size,
                   group_offset=k * r.groups_per_iteration, progress=False)


def open_stream(cfg: Config, policy: Policy, start: int, store: TurnStore | None = None) -> EngineStream:
    """The engine workers of ``open_engines`` behind an ``EngineStream`` (asynchronous rollouts,
    ``rollout.max_staleness`` ≥ 1), producing from iteration ``start`` on — or, on a resume,
    from the first production whose ids are not in ``store`` yet. Close it with ``.close()``."""
    r = cfg.rollout
    last = store.max_episode_id(cfg.run.name) if store is not None else None
    if last is not None:
        start = max(start, last // (r.groups_per_iteration * r.group_size) + 1)
    workers = open_engines(cfg, policy)
    try:
        return EngineStream(workers, lambda k: production_config(cfg, k), start=start, max_staleness=r.max_staleness,
                            n_groups=r.groups_per_iteration, mode=r.on_weight_update)
    except BaseException:
        workers.close()
        raise


def collect_iteration(policy: Policy, cfg: Config, iteration: int, pool=None,
                      engines: EngineWorkers | None = None) -> list[Episode]:
    """Play ``rollout.groups_per_iteration`` tasks × ``rollout.group_size`` episodes
    (``rollout.sampler: tree``: Tree-GRPO trees, ``agentrl.rollout.tree``).

    Task seeds are ``run.seed * 1_000_003 + iteration * groups + g``: fresh tasks each
    iteration, identical env seeds inside a group, reproducible for a given run seed.
    ``pool``: an open pool from ``open_pool`` for chain rollouts (default: one is opened
    and closed here). ``engines``: engine workers from ``open_engines`` (``rollout.engines``
    ≥ 1): the chains are played there, whole groups per worker, per-turn seeds.
    """
    r, cc = cfg.rollout, collect_config(cfg, iteration)
    if engines is not None:
        episodes = engines.collect(cc)
    elif r.sampler == "tree":  # ids are made unique over the run by the sampler
        return sample_trees(policy.engine, policy.renderer, cc, r.tree, iteration=iteration).episodes
    elif r.harness is not None:  # an external agent program plays through the recording proxy
        spec = HarnessSpec.from_config(r.harness, cfg.env.id, cc.env_kwargs)
        episodes = collect_harness_episodes(policy.engine, policy.renderer, spec, n_groups=cc.n_groups,
                                            group_size=cc.group_size, seed=cc.seed, run_id=cc.run_id,
                                            sampling=cc.sampling, max_parallel=r.harness.max_parallel,
                                            mode=r.harness.mode)
    elif pool is not None:
        episodes = collect(policy.engine, policy.renderer, cc, pool=pool)
    else:
        with open_pool(cfg) as own:
            episodes = collect(policy.engine, policy.renderer, cc, pool=own)
    offset = iteration * r.groups_per_iteration * r.group_size  # ids unique over the run
    for ep in episodes:
        ep.episode_id += offset
        ep.group_id += iteration * r.groups_per_iteration
        ep.turns[:] = [replace(t, episode_id=ep.episode_id, group_id=ep.group_id, policy_version=t.policy_version)
                       for t in ep.turns]
    return episodes


@dataclass(frozen=True)
class UpdatePlan:
    """The optimizer steps of one update phase: the trained rows as one ``TrainBatch`` and, per
    epoch, the row indices (int64 tensors) of each minibatch, in order. Built on rank 0 and
    broadcast, so every data-parallel rank takes the same steps over the same minibatches."""

    batch: TrainBatch
    epochs: list[list[torch.Tensor]]


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
    batch = build_batch([t.prompt_ids for t in picked], [t.completion_ids for t in picked],
                        [t.completion_logprobs for t in picked], advantages[rows], pad_id=policy.pad_id,
                        pack=cfg.update.pack, allowed=constraint_masks(picked, policy.renderer),
                        episodes=[t.episode_id for t in picked], grammar=grammar_masks(picked, policy.renderer))
    groups = update_groups(cfg.algorithm.estimator, table, rows)
    epochs = [groups if groups is not None else minibatches(
        batch.num_rows, cfg.update.minibatch, seed=cfg.run.seed * 7_919 + iteration * 101 + epoch)
        for epoch in range(cfg.update.epochs)]
    return UpdatePlan(batch, epochs)


def skipped_update_reason(table: TurnTable | None, advantages: np.ndarray | None) -> str:
    """Why ``plan_update`` found no row to train on (a phrase for the log line): no episode,
    every episode failed, no turn with tokens, or every advantage 0 (no contrast inside any
    group: e.g. all episodes of each group scored the same)."""
    if table is None or len(table) == 0:
        return "no episode was collected"
    if not table.episode_ok.any():
        return f"every episode failed ({len(np.unique(table.episode))} episode(s); see their status in the store)"
    if not (table.episode_ok & table.trainable).any():
        return "no finished turn carries token ids to train on"
    groups = len(np.unique(table.group[table.episode_ok & table.trainable]))
    return (f"every advantage is 0: no contrast inside any of the {groups} group(s) (every episode of a group "
            f"scored the same); larger groups or an easier task split give some")


def update_policy(policy: Policy, optimizer: torch.optim.Optimizer, cfg: Config, table: TurnTable | None,
                  advantages: np.ndarray | None, episodes: list[Episode], iteration: int,
                  dp: DistContext | None = None) -> tuple[list, Correction | None]:
    """Run the steps of ``plan_update``; returns their UpdateStats and the off-policy
    correction of the phase (``update.rollout_correction``; its KL is measured for ``none``
    too; None when no step was taken).

    ``dp`` (data-parallel runs): rank 0 plans from its ``table``/``advantages``/``episodes``
    and broadcasts the plan; the other ranks pass None for those and receive it; each step
    then trains every rank's share of the minibatch (``agentrl.update.step.update``). The
    correction recomputes π_old once per phase on every rank (the same batch everywhere, so
    the sharded model's collectives match).
    """
    main = dp is None or dp.is_main
    plan = plan_update(policy, cfg, table, advantages, episodes, iteration) if main else None
    if dp is not None:
        plan = dp.broadcast_object(plan)
    if plan is None:
        if main:
            log.warning("iteration %d: no update, %s; the policy is unchanged", iteration + 1,
                        skipped_update_reason(table, advantages))
        return [], None
    if main:
        log.info("iteration %d: update on %d turn(s) in %d optimizer step(s)", iteration + 1, plan.batch.num_turns,
                 sum(len(chunks) for chunks in plan.epochs))
    batch, corr = apply_rollout_correction(policy.model, plan.batch, cfg.update, temperature=1.0)
    stats = [update(policy.model, optimizer, batch.select(chunk), cfg.update, temperature=1.0, dp=dp)
             for chunks in plan.epochs for chunk in chunks]
    return stats, corr


def rtpo_iteration(policy: Policy, optimizer: torch.optim.Optimizer, cfg: Config, store: TurnStore,
                   iteration: int) -> tuple[list[Episode], TurnTable, np.ndarray, list]:
    """One RTPO iteration (``rollout.sampler: rtpo``, ALGORITHMS.md §9.2): after each reverse-turn
    round (``agentrl.rollout.reverse``) its episodes are stored, credited with the configured
    estimator and trained on (in its ``update_order``), and the policy version is bumped
    before the next, earlier branch point is sampled. Each branching turn's advantage is
    written once (in its own round). Returns (episodes, table, advantages, UpdateStats) of
    the whole iteration."""
    stats, written = [], {}
    est = cfg.algorithm.estimator

    def update_fn(rnd: RtpoRound) -> None:
        add_linked(store, list(rnd.new_episodes), run_id=cfg.run.name)
        check_success_reward(est, cfg.algorithm.kwargs, rnd.new_episodes)
        table = store.table(run_id=cfg.run.name, episode_ids=[e.episode_id for e in rnd.episodes])
        adv = compute_advantages(table, est, **cfg.algorithm.kwargs)
        new = np.isin(table.turn_id, [t.turn_id for e in rnd.new_episodes for t in e.turns])
        branch = table.branch if table.branch is not None else np.full(len(table), -1)
        mine = np.isin(branch, rnd.branch_ids) | (new & (branch < 0))
        store.set_advantages(cfg.run.name, table.turn_id[mine], adv[mine], iteration=iteration + 1, estimator=est)
        written.update(zip(table.turn_id[mine].tolist(), adv[mine].tolist()))
        with engine_asleep(policy.engine):  # a colocated engine frees the device for the update
            stats.extend(update_policy(policy, optimizer, cfg, table, adv, list(rnd.episodes), iteration)[0])
        sync_weights(policy)  # the next round samples with the updated weights

    episodes = run_rtpo_iteration(policy.engine, policy.renderer, collect_config(cfg, iteration), cfg.rollout.tree,
                                  update_fn, iteration=iteration)
    table = store.table(run_id=cfg.run.name, episode_ids=[e.episode_id for e in episodes])
    return episodes, table, np.array([written.get(int(t), 0.0) for t in table.turn_id]), stats


def sync_weights(policy: Policy, version: int | None = None, engines: EngineWorkers | None = None,
                 dp: DistContext | None = None) -> None:
    """Make the engine sample from the trainer's current weights, as policy ``version``
    (default: the engine's version + 1, i.e. after one more update).

    In-process HF: the engine samples from the trained model object, so only the version
    moves. Otherwise (vLLM, or rank 0's engine copy in a data-parallel run) the merged
    weights are pushed with ``engine.update_weights``. ``engines`` (``rollout.engines`` ≥ 1):
    the inference weights are pushed to every worker too, as ``version``. ``dp``: a
    collective (the shards are gathered to rank 0, which pushes; the other ranks only move
    their version counter).
    """
    version = policy.engine.policy_version + 1 if version is None else int(version)
    if policy.shares_weights:
        policy.engine.policy_version = version
        if engines is not None:
            engines.push_weights(inference_state_dict(policy.model), version)
        return
    state = inference_state(policy.model, dp) if dp is not None else inference_state_dict(policy.model)
    if state is None:  # a data-parallel rank other than 0
        policy.engine.policy_version = version
        return
    policy.engine.update_weights(state, version)
    if engines is not None:
        engines.push_weights(state, version)

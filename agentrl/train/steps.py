"""The rollout pieces of one training iteration, used by ``agentrl.train``: the rollout of an
iteration (chains — in this process, on every data-parallel rank, or on engine workers —
Tree-GRPO trees or external-harness episodes) and RTPO's interleaved reverse-turn rounds.
The update phase is ``agentrl.train.plan``, the weight sync ``agentrl.train.sync``.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Mapping

import numpy as np
import torch

from agentrl.config import Config, ConfigError
from agentrl.config.schedule import scheduled_kwargs
from agentrl.credit import check_success_reward, compute_advantages
from agentrl.distributed import DistContext
from agentrl.eval import env_kwargs, loop_config
from agentrl.llm.base import SamplingParams
from agentrl.llm.policy import Policy
from agentrl.rollout.collector import CollectConfig, collect
from agentrl.rollout.engines.factory import open_engine_workers
from agentrl.rollout.engines.interface import EngineSpec, EngineWorkers, shard_config, shard_groups
from agentrl.rollout.engines.stream import EngineStream
from agentrl.rollout.harness import HarnessSpec, collect_harness_episodes
from agentrl.rollout.ray_backend import make_env_pool
from agentrl.rollout.reverse import RtpoRound, rtpo_episode_stride, run_rtpo_iteration
from agentrl.rollout.tree import add_linked, sample_trees, tree_episode_stride
from agentrl.store import TurnStore
from agentrl.train.colocate import engine_asleep
from agentrl.train.plan import update_policy
from agentrl.train.sync import sync_weights
from agentrl.types import Episode, TurnTable
from agentrl.update.lora import inference_state_dict

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
                       max_observation_chars=cfg.env.max_observation_chars,
                       return_hidden=cfg.policy.return_hidden, run_id=cfg.run.name, progress=cfg.log.console,
                       turn_seeds=r.turn_seeds)
    return cc


def open_pool(cfg: Config, dp: DistContext | None = None):
    """The env pool that chain rollouts of ``cfg`` play on (one slot per episode of an
    iteration; on a data-parallel rank, per episode of its largest share); the trainer keeps it
    open across iterations (opening one costs seconds: worker processes, env imports, game
    loading). Close it with ``.close()``."""
    r, cc = cfg.rollout, collect_config(cfg, 0)
    slots = cc.num_slots or cc.n_episodes
    if dp is not None:
        slots = min(slots, -(-cc.n_groups // dp.world_size) * cc.group_size)
    return make_env_pool(r.backend, cc.env_id, slots, **cc.pool_kwargs())


def engine_spec(cfg: Config, policy: Policy) -> EngineSpec:
    """How the run's engine workers build their engines (``policy.engine`` hf | vllm, dtype,
    device — on Ray: ``cuda`` when ``rollout.engine_gpus`` reserves GPUs, else the CPU).

    Raises:
        ConfigError: an engine other than hf / vllm; Ray engine actors on a CUDA
            ``policy.device`` without ``rollout.engine_gpus`` (Ray would hide every GPU).
    """
    from agentrl.llm.models import resolve_model

    p, r = cfg.policy, cfg.rollout
    if p.engine not in ("hf", "vllm"):
        raise ConfigError(f"rollout.engines={r.engines} runs hf or vllm engine workers, not policy.engine={p.engine}; "
                          "set policy.engine: hf or vllm (or rollout.engines: 0)")
    device = p.device
    if r.backend == "ray":
        if str(p.device).startswith("cuda") and not r.engine_gpus:
            raise ConfigError(f"policy.device={p.device} with Ray engine actors needs rollout.engine_gpus >= 1 (GPUs "
                              "per actor; Ray hides the GPUs from an actor that reserves none), or policy.device: cpu")
        device = "cuda" if r.engine_gpus else "cpu"
    return EngineSpec(model=str(resolve_model(p.model)), dtype=p.dtype, device=device, num_threads=p.num_threads,
                      max_context=policy.engine.max_context, prefix_cache_mb=p.prefix_cache_mb,
                      decode_attention=p.decode_attention, engine=p.engine, vllm=p.vllm,
                      weight_bucket_mb=p.vllm.weight_bucket_mb, constrained=p.action_constraint == "admissible")


def open_engines(cfg: Config, policy: Policy, weights: Mapping | None = None) -> EngineWorkers:
    """The run's ``rollout.engines`` engine workers (``rollout.backend``: local processes, one
    device each from ``rollout.engine_devices``, or Ray actors with ``rollout.engine_gpus`` GPUs
    each, placed by ``rollout.placement``), started with the trainer's current inference weights and policy
    version over the
    weight broadcast group; the trainer keeps them for the whole run. Close them with ``.close()``.

    ``weights``: the inference weights to start them with (a data-parallel run's rank 0 passes
    those gathered from the shards, ``agentrl.distributed.inference_state``); None: the trainer's
    own (one process), or the engine's separate HF copy when it has one.

    Raises:
        ConfigError: see ``engine_spec``. EngineWorkerError: a worker failed to start.
        ValueError: the weights are FSDP2 shards (``DTensor``): gather them first.
    """
    r = cfg.rollout
    spec = engine_spec(cfg, policy)
    if weights is None:
        own = getattr(policy.engine, "model", None)
        weights = inference_state_dict(policy.model) if policy.shares_weights or own is None \
            else dict(own.state_dict())
    sharded = next((k for k, v in weights.items() if hasattr(v, "full_tensor")), None)
    if sharded is not None:
        raise ValueError(f"engine workers start from whole tensors, but {sharded!r} is an FSDP2 shard (DTensor): a "
                         "data-parallel run gathers the weights on every rank first (agentrl.distributed."
                         f"inference_state; RunParts.start_engines) - rank 0's {cfg.policy.engine} engine holds no "
                         "copy to start them from")
    if r.backend == "local":
        return open_engine_workers("local", r.engines, spec, weights, policy.engine.policy_version,
                                   devices=r.engine_devices, transport=r.weight_transport)
    pl = r.placement
    workers = open_engine_workers(r.backend, r.engines, spec, weights, policy.engine.policy_version,
                                  num_cpus_per_worker=pl.engine_cpus, num_gpus_per_worker=r.engine_gpus,
                                  resources=pl.engine_resources, placement_strategy=pl.strategy,
                                  separate_nodes=pl.separate_nodes, broadcast_host=pl.broadcast_host,
                                  broadcast_ports=pl.broadcast_ports)
    log.info("%d Ray engine actor(s) on node(s) %s; the trainer on node %s", r.engines,
             [n[:12] for n in getattr(workers, "nodes", [])], str(getattr(workers, "trainer_node", "?"))[:12])
    return workers


def episode_id_stride(cfg: Config) -> int:
    """Episode ids one iteration may use: iteration ``k`` numbers its episodes from
    ``k * episode_id_stride(cfg)`` on (chains: groups × G; ``tree``: ``tree_episode_stride``;
    ``rtpo``: ``rtpo_episode_stride``). A resume sets aside the ids from its first uncovered
    iteration's on."""
    r = cfg.rollout
    if r.sampler == "tree":
        return tree_episode_stride(r.groups_per_iteration, r.tree)
    if r.sampler == "rtpo":
        return rtpo_episode_stride(r.groups_per_iteration, r.group_size, r.tree)
    return r.groups_per_iteration * r.group_size


def production_config(cfg: Config, k: int) -> CollectConfig:
    """Production ``k`` of an asynchronous run (``rollout.max_staleness`` ≥ 1): iteration k's
    ``collect_config`` with the episode and group ids the synchronous loop gives them, no
    progress bar (the workers play it while the trainer updates)."""
    r = cfg.rollout
    return replace(collect_config(cfg, k), id_offset=k * episode_id_stride(cfg),
                   group_offset=k * r.groups_per_iteration, progress=False)


def open_stream(cfg: Config, policy: Policy, start: int, store: TurnStore | None = None,
                probe: tuple | None = None, weights: Mapping | None = None) -> EngineStream:
    """The engine workers of ``open_engines`` behind an ``EngineStream`` (asynchronous rollouts,
    ``rollout.max_staleness`` ≥ 1), producing from iteration ``start`` on — or, on a resume,
    from the first production whose ids are not in ``store`` yet. ``probe``: (prompt ids,
    completion ids) every worker scores after each weight load (``SyncCheck.check_reports``).
    Close it with ``.close()``."""
    r = cfg.rollout
    last = store.max_episode_id(cfg.run.name) if store is not None else None
    if last is not None:
        start = max(start, last // episode_id_stride(cfg) + 1)
    workers = open_engines(cfg, policy, weights)
    try:
        if probe is not None:
            workers.set_probe(*probe)
        return EngineStream(workers, lambda k: production_config(cfg, k), start=start, max_staleness=r.max_staleness,
                            n_groups=r.groups_per_iteration, mode=r.on_weight_update)
    except BaseException:
        workers.close()
        raise


def rolls_out_on_ranks(cfg: Config, dp: DistContext | None) -> bool:
    """True when every data-parallel rank plays its share of the chains with its own engine
    (``dp`` given, chain sampler, no harness, no engine workers); else one process rolls out."""
    r = cfg.rollout
    return dp is not None and r.sampler == "chain" and r.harness is None and not r.engines


def collect_iteration(policy: Policy, cfg: Config, iteration: int, pool=None,
                      engines: EngineWorkers | None = None, dp: DistContext | None = None) -> list[Episode]:
    """Play ``rollout.groups_per_iteration`` tasks × ``rollout.group_size`` episodes
    (``rollout.sampler: tree``: Tree-GRPO trees, ``agentrl.rollout.tree``).

    Task seeds are ``run.seed * 1_000_003 + iteration * groups + g``: fresh tasks each
    iteration, identical env seeds inside a group, reproducible for a given run seed.
    ``pool``: an open pool from ``open_pool`` for chain rollouts (default: one is opened
    and closed here). ``engines``: engine workers from ``open_engines`` (``rollout.engines``
    ≥ 1): the chains are played there, whole groups per worker, per-turn seeds.
    ``dp`` (``rolls_out_on_ranks``): a collective — rank r plays the r-th block of whole
    groups (``shard_groups``) with its own engine, per-turn seeds (so the episodes are those
    of a 1-process run with ``rollout.turn_seeds``), each turn's ``info["engine_rank"]`` = r;
    rank 0 returns every rank's episodes in id order, the other ranks an empty list.
    """
    r, cc = cfg.rollout, collect_config(cfg, iteration)
    if rolls_out_on_ranks(cfg, dp):
        return _collect_on_ranks(policy, cfg, cc, iteration, pool, dp)
    if engines is not None:
        episodes = engines.collect(cc)
    elif r.sampler == "tree":  # ids are made unique over the run by the sampler
        return sample_trees(policy.engine, policy.renderer, cc, r.tree, iteration=iteration).episodes
    elif r.harness is not None:  # an external agent program plays through the recording proxy
        spec = HarnessSpec.from_config(r.harness, cfg.env.id, cc.env_kwargs)
        episodes = collect_harness_episodes(policy.engine, policy.renderer, spec, n_groups=cc.n_groups,
                                            group_size=cc.group_size, seed=cc.seed, run_id=cc.run_id,
                                            sampling=cc.sampling, max_parallel=r.harness.max_parallel,
                                            mode=r.harness.mode, tool_schemas=r.harness.tool_schemas,
                                            force_tools=r.harness.force_tool_call, resends=r.harness.resends,
                                            only_tools=r.harness.only_tools)
    elif pool is not None:
        episodes = collect(policy.engine, policy.renderer, cc, pool=pool)
    else:
        with open_pool(cfg) as own:
            episodes = collect(policy.engine, policy.renderer, cc, pool=own)
    return _number(episodes, cfg, iteration)


def _number(episodes: list[Episode], cfg: Config, iteration: int) -> list[Episode]:
    """Offset the episode and group ids of iteration ``iteration`` so they are unique over the run."""
    r = cfg.rollout
    offset = iteration * episode_id_stride(cfg)
    for ep in episodes:
        ep.episode_id += offset
        ep.group_id += iteration * r.groups_per_iteration
        ep.turns[:] = [replace(t, episode_id=ep.episode_id, group_id=ep.group_id, policy_version=t.policy_version)
                       for t in ep.turns]
    return episodes


def _collect_on_ranks(policy: Policy, cfg: Config, cc: CollectConfig, iteration: int, pool,
                      dp: DistContext) -> list[Episode]:
    """This rank's block of groups, played with its own engine, gathered to rank 0."""
    mine = shard_groups(cc.n_groups, dp.world_size)[dp.rank]
    episodes: list[Episode] = []
    if mine:  # fewer groups than ranks: the last ranks play none
        shard = replace(shard_config(cc, mine), progress=cc.progress and dp.is_main)
        if pool is not None:
            episodes = collect(policy.engine, policy.renderer, shard, pool=pool)
        else:
            with open_pool(cfg, dp) as own:
                episodes = collect(policy.engine, policy.renderer, shard, pool=own)
    for ep in episodes:
        for t in ep.turns:
            t.info["engine_rank"] = dp.rank
    gathered = dp.gather_object(_number(episodes, cfg, iteration))
    return [] if gathered is None else sorted((ep for part in gathered for ep in part), key=lambda e: e.episode_id)


def rtpo_iteration(policy: Policy, optimizer: torch.optim.Optimizer, cfg: Config, store: TurnStore,
                   iteration: int) -> tuple[list[Episode], TurnTable, np.ndarray, list, dict[str, float]]:
    """One RTPO iteration (``rollout.sampler: rtpo``, ALGORITHMS.md §9.2): after each reverse-turn
    round (``agentrl.rollout.reverse``) its episodes are stored, credited with the configured
    estimator and trained on (in its ``update_order``), and the policy version is bumped
    before the next, earlier branch point is sampled. Each branching turn's advantage is
    written once (in its own round). Returns (episodes, table, advantages, UpdateStats, the credit
    audit's metrics summed over the rounds) of the whole iteration."""
    stats, written, audited = [], {}, {}
    est = cfg.algorithm.estimator

    def update_fn(rnd: RtpoRound) -> None:
        add_linked(store, list(rnd.new_episodes), run_id=cfg.run.name, iteration=iteration + 1)
        check_success_reward(est, cfg.algorithm.kwargs, rnd.new_episodes)
        table = store.table(run_id=cfg.run.name, episode_ids=[e.episode_id for e in rnd.episodes])
        adv = compute_advantages(table, est, **scheduled_kwargs(cfg.algorithm.kwargs, cfg.algorithm.schedule, iteration))
        new = np.isin(table.turn_id, [t.turn_id for e in rnd.new_episodes for t in e.turns])
        branch = table.branch if table.branch is not None else np.full(len(table), -1)
        mine = np.isin(branch, rnd.branch_ids) | (new & (branch < 0))
        store.set_advantages(cfg.run.name, table.turn_id[mine], adv[mine], iteration=iteration + 1, estimator=est)
        written.update(zip(table.turn_id[mine].tolist(), adv[mine].tolist()))
        with engine_asleep(policy.engine):  # a colocated engine frees the device for the update
            steps, _, audit = update_policy(policy, optimizer, cfg, table, adv, list(rnd.episodes), iteration)
        stats.extend(steps)
        for key, value in audit.items():  # audit/rows, audit/tokens, audit/seconds over the rounds
            audited[key] = audited.get(key, 0.0) + value
        sync_weights(policy)  # the next round samples with the updated weights

    episodes = run_rtpo_iteration(policy.engine, policy.renderer, collect_config(cfg, iteration), cfg.rollout.tree,
                                  update_fn, iteration=iteration)
    table = store.table(run_id=cfg.run.name, episode_ids=[e.episode_id for e in episodes])
    return episodes, table, np.array([written.get(int(t), 0.0) for t in table.turn_id]), stats, audited

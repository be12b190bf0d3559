"""The training loop, top to bottom (DESIGN.md: agentrl.train).

One iteration: collect groups of episodes with the current policy → store them (with the
policy version) → build the TurnTable from the store → advantages from the configured
estimator (by name; the loop never branches on it) → write them to the store → build the
TrainBatch → ``update.epochs`` passes of PPO-family minibatch steps (in the estimator's
``update_order`` when it has one, e.g. RTPO) → sync weights to the engine → log metrics.
Every ``run.eval_every`` iterations the policy is evaluated greedily on the held-out
panel; every ``run.save_every`` iterations (and at the end) a checkpoint is written.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
import yaml

from agentrl.config import Config, to_dict
from agentrl.credit import compute_advantages, get_estimator, update_groups
from agentrl.credit.stats import advantage_stats
from agentrl.eval import EvalResult, env_kwargs, evaluate, loop_config
from agentrl.llm.base import SamplingParams
from agentrl.llm.constrained import constraint_masks
from agentrl.llm.policy import Policy, load_policy
from agentrl.log import make_logger
from agentrl.rollout.collector import CollectConfig, collect
from agentrl.rollout.harness import HarnessSpec, collect_harness_episodes
from agentrl.rollout.ray_backend import make_env_pool
from agentrl.rollout.reverse import RtpoRound, run_rtpo_iteration
from agentrl.rollout.stats import rollout_stats
from agentrl.rollout.tree import add_linked, sample_trees
from agentrl.store import TurnStore
from agentrl.train_critic import critic_step, make_critic, with_values
from agentrl.types import Episode, TurnTable
from agentrl.update.batch import build_batch, minibatches
from agentrl.update.checkpoint import TrainState, latest_checkpoint, load_checkpoint, save_checkpoint
from agentrl.update.lora import prepare_policy
from agentrl.update.step import make_optimizer, update


CONSOLE_KEYS = ("rollout/success_rate", "rollout/mean_return", "rollout/mean_turns", "rollout/invalid_rate",
                "adv/std", "adv/zero_frac", "update/clip_frac", "update/approx_kl", "update/entropy",
                "eval/greedy_success", "time/rollout_s", "time/update_s")


@dataclass(frozen=True)
class TrainResult:
    """What a finished ``train`` call reports.

    Attributes:
        run_dir: folder with config.yaml, store.sqlite, metrics.jsonl and checkpoints/.
        store_path: the SQLite turn store. run_id: the run's id in the store.
        state: counters at the end. evals: held-out results in the order they were taken.
    """

    run_dir: Path
    store_path: Path
    run_id: str
    state: TrainState
    evals: tuple[EvalResult, ...]


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


def collect_iteration(policy: Policy, cfg: Config, iteration: int) -> list[Episode]:
    """Play ``rollout.groups_per_iteration`` tasks × ``rollout.group_size`` episodes
    (``rollout.sampler: tree``: Tree-GRPO trees, ``agentrl.rollout.tree``).

    Task seeds are ``run.seed * 1_000_003 + iteration * groups + g``: fresh tasks each
    iteration, identical env seeds inside a group, reproducible for a given run seed.
    """
    r, cc = cfg.rollout, collect_config(cfg, iteration)
    if r.sampler == "tree":  # ids are made unique over the run by the sampler
        return sample_trees(policy.engine, policy.renderer, cc, r.tree, iteration=iteration).episodes
    if r.harness is not None:  # an external agent program plays through the recording proxy
        spec = HarnessSpec.from_config(r.harness, cfg.env.id, cc.env_kwargs)
        episodes = collect_harness_episodes(policy.engine, policy.renderer, spec, n_groups=cc.n_groups,
                                            group_size=cc.group_size, seed=cc.seed, run_id=cc.run_id,
                                            sampling=cc.sampling, max_parallel=r.harness.max_parallel,
                                            mode=r.harness.mode)
    else:
        with make_env_pool(r.backend, cc.env_id, cc.num_slots or cc.n_episodes, env_kwargs=cc.env_kwargs,
                           num_workers=cc.num_workers, step_timeout_s=cc.step_timeout_s) as pool:
            episodes = collect(policy.engine, policy.renderer, cc, pool=pool)
    offset = iteration * r.groups_per_iteration * r.group_size  # ids unique over the run
    for ep in episodes:
        ep.episode_id += offset
        ep.group_id += iteration * r.groups_per_iteration
        ep.turns[:] = [replace(t, episode_id=ep.episode_id, group_id=ep.group_id, policy_version=t.policy_version)
                       for t in ep.turns]
    return episodes


def update_policy(policy: Policy, optimizer: torch.optim.Optimizer, cfg: Config, table: TurnTable,
                  advantages: np.ndarray, episodes: list[Episode], iteration: int) -> list:
    """``update.epochs`` passes over the trainable rows with a non-zero advantage.

    Minibatches follow the estimator's update groups when it defines an order (RTPO's
    reverse-turn ``update_order``: one group per branch, latest branch point first);
    otherwise they are shuffled chunks of ``update.minibatch`` rows. Returns UpdateStats.
    """
    turns = {t.turn_id: t for ep in episodes for t in ep.turns}
    rows = np.flatnonzero(table.episode_ok & table.trainable & (advantages != 0.0))
    if rows.size == 0:
        return []
    picked = [turns[int(i)] for i in table.turn_id[rows]]
    batch = build_batch([t.prompt_ids for t in picked], [t.completion_ids for t in picked],
                        [t.completion_logprobs for t in picked], advantages[rows], pad_id=policy.pad_id,
                        pack=cfg.update.pack, allowed=constraint_masks(picked, policy.renderer))
    groups = update_groups(cfg.algorithm.estimator, table, rows)
    stats = []
    for epoch in range(cfg.update.epochs):
        chunks = groups if groups is not None else minibatches(
            batch.num_rows, cfg.update.minibatch, seed=cfg.run.seed * 7_919 + iteration * 101 + epoch)
        for chunk in chunks:
            stats.append(update(policy.model, optimizer, batch.select(chunk), cfg.update,
                                temperature=1.0))
    return stats


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
        table = store.table(run_id=cfg.run.name, episode_ids=[e.episode_id for e in rnd.episodes])
        adv = compute_advantages(table, est, **cfg.algorithm.kwargs)
        new = np.isin(table.turn_id, [t.turn_id for e in rnd.new_episodes for t in e.turns])
        branch = table.branch if table.branch is not None else np.full(len(table), -1)
        mine = np.isin(branch, rnd.branch_ids) | (new & (branch < 0))
        store.set_advantages(cfg.run.name, table.turn_id[mine], adv[mine], iteration=iteration, estimator=est)
        written.update(zip(table.turn_id[mine].tolist(), adv[mine].tolist()))
        stats.extend(update_policy(policy, optimizer, cfg, table, adv, list(rnd.episodes), iteration))
        policy.engine.policy_version += 1  # the next round samples with the updated weights

    episodes = run_rtpo_iteration(policy.engine, policy.renderer, collect_config(cfg, iteration), cfg.rollout.tree,
                                  update_fn, iteration=iteration)
    table = store.table(run_id=cfg.run.name, episode_ids=[e.episode_id for e in episodes])
    return episodes, table, np.array([written.get(int(t), 0.0) for t in table.turn_id]), stats


def _iteration_metrics(episodes, table, adv, stats, times, tokens_per_s) -> dict[str, float]:
    m = rollout_stats(episodes).as_metrics()
    m.update(advantage_stats(table, adv).as_metrics())
    if stats:
        for key in ("loss", "clip_frac", "approx_kl", "entropy", "grad_norm", "kl"):
            m[f"update/{key}"] = float(np.mean([getattr(s, key) for s in stats]))
        m["update/steps"] = float(len(stats))
    m.update({f"time/{k}_s": v for k, v in times.items()})
    m["perf/gen_tokens_per_s"] = tokens_per_s
    return m


def train(cfg: Config, *, resume: bool = True) -> TrainResult:
    """Run (or resume) the training described by ``cfg``; see the module docstring.

    Raises:
        ConfigError / KeyError / FileNotFoundError: bad config, unknown names, missing model.
    """
    torch.manual_seed(cfg.run.seed)
    np.random.seed(cfg.run.seed)
    run_dir = Path(cfg.run.out_dir) / cfg.run.name
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    policy = load_policy(cfg.policy)
    policy.model = prepare_policy(policy.model, cfg.update, cfg.policy.lora)
    policy.engine.model = policy.model
    optimizer = make_optimizer(policy.model, cfg.update.lr, cfg.update.weight_decay)
    ckpt = latest_checkpoint(run_dir) if resume else None
    state = load_checkpoint(ckpt, policy.model, optimizer) if ckpt else TrainState()
    policy.engine.policy_version = state.policy_version
    store = TurnStore(run_dir / "store.sqlite")
    critic = make_critic(cfg) if "value" in get_estimator(cfg.algorithm.estimator).requires else None
    evals: list[EvalResult] = []
    with make_logger(cfg.log, run_dir, run_name=cfg.run.name, config=to_dict(cfg), console_keys=CONSOLE_KEYS) as logger:
        for it in range(state.iteration, cfg.run.iterations):
            t0 = time.perf_counter()
            if cfg.rollout.sampler == "rtpo":  # sampling, credit and updates interleave (reverse-turn rounds)
                episodes, table, adv, stats = rtpo_iteration(policy, optimizer, cfg, store, it)
                t1 = t2 = time.perf_counter()
            else:
                episodes = collect_iteration(policy, cfg, it)
                t1 = time.perf_counter()
                add_linked(store, episodes, run_id=cfg.run.name)  # tree branches after their parents
                table = store.table(run_id=cfg.run.name, episode_ids=[e.episode_id for e in episodes])
                if critic is not None:  # turn-PPO: V(s_t) per turn before the estimator runs
                    table, all_turns = with_values(critic, table, episodes, policy.pad_id, cfg.update.micro_batch)
                adv = compute_advantages(table, cfg.algorithm.estimator, **cfg.algorithm.kwargs)
                store.set_advantages(cfg.run.name, table.turn_id, adv, iteration=it, estimator=cfg.algorithm.estimator)
                t2 = time.perf_counter()
                stats = update_policy(policy, optimizer, cfg, table, adv, episodes, it)
                policy.engine.policy_version += 1  # the engine shares the trained model: weights are in sync
            critic_stats = critic_step(critic, cfg, table, all_turns) if critic is not None else []
            t3 = time.perf_counter()
            gen = sum(t.completion_ids.size for e in episodes for t in e.turns)
            metrics = _iteration_metrics(episodes, table, adv, stats,
                                         {"rollout": t1 - t0, "credit": t2 - t1, "update": t3 - t2}, gen / max(t1 - t0, 1e-9))
            for cs in critic_stats[-1:]:
                metrics.update({"critic/loss": cs.loss, "critic/explained_var": cs.explained_var})
            state = TrainState(iteration=it + 1, optimizer_steps=state.optimizer_steps + len(stats),
                               policy_version=policy.engine.policy_version,
                               episodes_stored=state.episodes_stored + len(episodes))
            if cfg.run.eval_every and (it + 1) % cfg.run.eval_every == 0:
                result, _ = evaluate(policy.engine, policy.renderer, cfg, greedy=True)
                evals.append(result)
                metrics.update(result.as_metrics())
            logger.log(it + 1, metrics)
            store.add_metrics(cfg.run.name, it, metrics)
            if (cfg.run.save_every and (it + 1) % cfg.run.save_every == 0) or it + 1 == cfg.run.iterations:
                save_checkpoint(run_dir, policy.model, optimizer, state)
    store.close()
    return TrainResult(run_dir=run_dir, store_path=run_dir / "store.sqlite", run_id=cfg.run.name, state=state,
                       evals=tuple(evals))

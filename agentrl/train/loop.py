"""The training loop, top to bottom (DESIGN.md: agentrl.train): ``train`` and its iterations.

One iteration: collect groups of episodes with the current policy → store them (with the
policy version) → build the TurnTable from the store (+ the columns of the step scorers the
estimator declares, e.g. critic values, and of its declared store query, e.g. 3SPO's per-state
statistics of the earlier iterations) → advantages from the configured estimator (by name; the
loop never branches on it, it serves the estimator's declarations) → write them to the store → build the
TrainBatch → ``update.epochs`` passes of PPO-family minibatch steps (in the estimator's
``update_order`` when it has one, e.g. RTPO) → sync weights to the engine → log metrics.
Every ``run.eval_every`` iterations the policy is evaluated greedily on the held-out
panel (and before the first iteration with ``run.eval_before``), its episodes stored under
the run id ``<run>/eval-<when>``; every ``run.save_every`` iterations (and at the end) a
checkpoint is written.
"""

from __future__ import annotations

import logging
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from agentrl.config import Config, ConfigError, to_dict
from agentrl.credit import check_success_reward, compute_advantages, get_estimator
from agentrl.distributed import DistContext, inference_state, trained_policy
from agentrl.env.panels import Panel
from agentrl.eval import EvalResult, eval_panel, evaluate, fresh_run_id, record_panel
from agentrl.llm.models import resolve_model
from agentrl.llm.policy import Policy, load_policy
from agentrl.log import make_logger
from agentrl.rollout.stats import sample_turns
from agentrl.rollout.tree import add_linked
from agentrl.store import EVAL_RUN, TurnStore, get_store_query
from agentrl.train.checks import check_config
from agentrl.train.colocate import engine_asleep
from agentrl.train.judging import open_judge
from agentrl.train.launches import Launch
from agentrl.train.metrics import IterationResult, iteration_metrics
from agentrl.train.exclusion import drop_thin_groups, excluded_by_cause
from agentrl.train.run_dir import RunLock, prepare_run_dir, set_aside_interrupted
from agentrl.train.plan import report_failures, update_policy
from agentrl.config.schedule import scheduled_kwargs
from agentrl.train.scorers import StepScorer, make_scorers
from agentrl.train.steps import (collect_iteration, episode_id_stride, open_engines, open_pool, open_stream,
                                 rolls_out_on_ranks, rtpo_iteration)
from agentrl.train.sync import SyncCheck, synced
from agentrl.update.checkpoint import TrainState, load_checkpoint, save_checkpoint
from agentrl.update.step import make_optimizer

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
        is_main: False on the data-parallel ranks other than 0 (they roll out, store, log
            and evaluate nothing; ``evals`` is empty there).
    """

    run_dir: Path
    store_path: Path
    run_id: str
    state: TrainState
    evals: tuple[EvalResult, ...]
    is_main: bool = True


@dataclass
class RunParts:
    """What one run holds while it trains: the policy (engine + model), its optimizer, the
    turn store, the step scorers the estimator declares (a critic, ...), the env pool of chain
    rollouts and the ``rollout.engines`` engine workers (both opened at the first iteration,
    kept open across iterations, closed by ``close``). ``dp``: the process group of a
    data-parallel run (None in one process); only rank 0 has a ``store``. ``sync``: the probe
    after every weight sync (``agentrl.train.sync``; None when off)."""

    policy: Policy
    optimizer: torch.optim.Optimizer
    store: TurnStore | None
    scorers: list[StepScorer] = field(default_factory=list)
    pool: object | None = None
    engines: object | None = None
    dp: DistContext | None = None
    sync: SyncCheck | None = None
    judge: object | None = None  # agentrl.rollout.judge.Judge, opened at the first judged iteration

    @property
    def is_main(self) -> bool:
        """Rank 0 (or the only process): rolls out, writes the store, logs, evaluates."""
        return self.dp is None or self.dp.is_main

    def chain_engines(self, cfg: Config, iteration: int = 0, weights=None):
        """The run's engine workers (None when ``rollout.engines`` is 0); with
        ``rollout.max_staleness`` ≥ 1 an ``EngineStream`` producing from ``iteration`` on.
        ``weights``: what they start with (``open_engines``; None: the trainer's own)."""
        if self.engines is None and cfg.rollout.engines:
            probe = None if self.sync is None else (self.sync.prompt, self.sync.completion)
            self.engines = open_stream(cfg, self.policy, iteration, self.store, probe, weights) \
                if cfg.rollout.max_staleness else open_engines(cfg, self.policy, weights)
        return self.engines

    def start_engines(self, cfg: Config, iteration: int) -> None:
        """Data-parallel run with ``rollout.engines`` ≥ 1: a **collective** (every rank calls it
        before the first iteration) — the trainer's shards are gathered to rank 0, which starts
        its engine workers with them (rank 0's own engine may hold no readable copy: vLLM).
        Otherwise nothing (``chain_engines`` opens them when first needed)."""
        if self.dp is None or not cfg.rollout.engines or self.engines is not None:
            return
        weights = inference_state(self.policy.model, self.dp)  # rank 0 gets the dict, the others None
        if self.is_main:
            self.chain_engines(cfg, iteration, weights)

    def chain_pool(self, cfg: Config):
        """The run's env pool for plain chain rollouts (None for trees, harnesses and engine
        workers); on a data-parallel rank, sized for its share of the groups."""
        if cfg.rollout.sampler != "chain" or cfg.rollout.harness is not None or cfg.rollout.engines:
            return None
        if self.pool is None:
            self.pool = open_pool(cfg, self.dp)
        return self.pool

    def reward_judge(self, cfg: Config):
        """The run's ``Judge`` (``reward.judge``; None when off), opened on first use."""
        if self.judge is None and cfg.reward.judge is not None:
            self.judge = open_judge(cfg, self.policy)
        return self.judge

    def close(self) -> None:
        """Close the judge, the engine workers, the env pool, the policy's engine when it has a ``close``
        (vLLM: after the run's last collective — its shutdown ends the process group it shares
        under torchrun) and the store (the store even when closing the others fails)."""
        try:
            if self.judge is not None:
                self.judge.close()
                self.judge = None
            if self.engines is not None:
                self.engines.close()
                self.engines = None
            if self.pool is not None:
                self.pool.close()
                self.pool = None
            close = getattr(self.policy.engine, "close", None)
            if callable(close):
                close()
        finally:
            if self.store is not None:
                self.store.close()


def chain_iteration(parts: RunParts, cfg: Config, it: int) -> IterationResult:
    """Collect (chains, trees or harness episodes) → store → TurnTable (+ the declared step
    scorers' columns and store query) → advantages → store them → update → bump the policy
    version → the scorers' own steps.

    Data-parallel: every rank plays its share of the chains with its own engine and rank 0
    gathers them (trees, harnesses and engine workers: rank 0 alone collects); rank 0 alone
    stores and computes advantages; every rank then takes the update steps (rank 0
    broadcasts them) and joins the weight sync and its probe."""
    t0 = time.perf_counter()
    episodes, table, adv, extra = [], None, None, {}
    if parts.is_main and cfg.rollout.max_staleness:  # asynchronous: groups the workers played meanwhile
        got = parts.chain_engines(cfg, it).take(parts.policy.engine.policy_version)
        episodes, extra = got.episodes, got.as_metrics(cfg.rollout.max_staleness)
    elif parts.is_main or rolls_out_on_ranks(cfg, parts.dp):
        episodes = collect_iteration(parts.policy, cfg, it, pool=parts.chain_pool(cfg),
                                     engines=parts.chain_engines(cfg), dp=parts.dp)
    t1 = time.perf_counter()
    if parts.is_main:
        if parts.reward_judge(cfg) is not None:  # the judge's score as (or added to) each ok episode's reward
            extra.update(parts.judge.apply(episodes).as_metrics())
        # tree branches after their parents (stored first); each tagged with its iteration (what a resume keeps)
        add_linked(parts.store, episodes, run_id=cfg.run.name, iteration=it + 1)
        report_failures(episodes, it, stop_when_all=parts.dp is None or not parts.dp.distributed)  # stored: viewable
        check_success_reward(cfg.algorithm.estimator, cfg.algorithm.kwargs, episodes)
        table = parts.store.table(run_id=cfg.run.name, episode_ids=[e.episode_id for e in episodes])
        table, drop = drop_thin_groups(table, episodes, cfg.rollout.min_group_valid)  # failed episodes: P5 already
        extra.update({**excluded_by_cause(episodes), **drop.as_metrics()})
        for scorer in parts.scorers:  # e.g. the critic's V(s_t) per turn, before the estimator runs
            table = scorer.score(table, episodes, it)
        query = get_estimator(cfg.algorithm.estimator).declares.store_query
        if query is not None:  # e.g. 3SPO: the earlier iterations' per-state counts
            table = get_store_query(query)(parts.store, cfg.run.name, table, it + 1)
        adv = compute_advantages(table, cfg.algorithm.estimator, group_by_version=cfg.algorithm.group_by_version,
                                 **scheduled_kwargs(cfg.algorithm.kwargs, cfg.algorithm.schedule, it))
        parts.store.set_advantages(cfg.run.name, table.turn_id, adv, iteration=it + 1,  # 1-based, as everywhere
                                   estimator=cfg.algorithm.estimator)
        if table.scores:  # the scorers' columns beside them: the viewer reruns the estimator's breakdown
            parts.store.set_scores(cfg.run.name, table.turn_id, table.scores, iteration=it + 1)
    t2 = time.perf_counter()
    with engine_asleep(parts.policy.engine):  # a colocated engine frees the device for the update
        stats, corr, audited = update_policy(parts.policy, parts.optimizer, cfg, table, adv, episodes, it, dp=parts.dp)
    if corr is not None:  # behaviour–trainer KL, capped / masked token fractions
        extra.update(corr.as_metrics())
    extra.update(audited)  # audit/rows, audit/tokens, audit/seconds
    extra.update(synced(parts.policy, cfg, parts.sync, engines=parts.engines, dp=parts.dp))  # wakes a sleeping engine
    scored = {k: v for scorer in parts.scorers for k, v in scorer.learn(table, adv, episodes, it).items()}
    seconds = {"rollout": t1 - t0, "credit": t2 - t1, "update": time.perf_counter() - t2}
    return IterationResult(episodes, table, adv, stats, scored, seconds, extra)


def run_iteration(parts: RunParts, cfg: Config, it: int) -> IterationResult:
    """One iteration: RTPO's interleaved reverse-turn rounds, or ``chain_iteration``."""
    if cfg.rollout.sampler != "rtpo":
        return chain_iteration(parts, cfg, it)
    t0 = time.perf_counter()
    episodes, table, adv, stats, audited = rtpo_iteration(parts.policy, parts.optimizer, cfg, parts.store, it)
    return IterationResult(episodes, table, adv, stats, {}, {"rollout+update": time.perf_counter() - t0}, audited)


def check_distributed(cfg: Config, ctx: DistContext) -> None:
    """Refuse what a data-parallel run does not support (before any weights load).

    Raises:
        ConfigError: an estimator that declares step scorers (turn-PPO's and HiPER's critic) or
        ``rollout.sampler: rtpo`` (updates interleaved with its rollout rounds) with ``WORLD_SIZE`` ≥ 2. (vLLM engines run on every rank;
        asynchronous rollouts run on rank 0's engine workers.)
    """
    if not ctx.distributed:
        return
    scorers = get_estimator(cfg.algorithm.estimator).declares.scorers
    why = (f"step scorers {list(scorers)} (declared by estimator {cfg.algorithm.estimator!r})" if scorers
           else "rollout.sampler: rtpo" if cfg.rollout.sampler == "rtpo" else None)
    if why:
        raise ConfigError(f"data-parallel training ({ctx.world_size} ranks) does not support {why} yet; "
                          "run it in one process (python -m agentrl train ...) or change that setting")


def start_run(cfg: Config, run_dir: Path, resume: bool, ctx: DistContext | None = None, *,
              force_resume: bool = False, launch: Launch | None = None) -> tuple[RunParts, TrainState]:
    """Set the run folder up (``prepare_run_dir``), load the policy (+ LoRA), optimizer,
    critic, store and the latest checkpoint when resuming. Data-parallel (``ctx.distributed``):
    rank 0 alone sets the run folder up and opens the store; every rank shards its model and
    loads the checkpoint.

    Raises:
        ValueError: an estimator that declares step scorers (a critic) with ``rollout.sampler: rtpo``.
        ConfigError: a resume with another config (``prepare_run_dir``; on every rank),
            before any weights load.
    """
    ctx = ctx or DistContext()
    scorer_names = get_estimator(cfg.algorithm.estimator).declares.scorers
    if scorer_names and cfg.rollout.sampler == "rtpo":
        raise ValueError(f"estimator {cfg.algorithm.estimator!r} needs step scorers {list(scorer_names)} (e.g. a "
                         "critic), which rollout.sampler=rtpo does not support; use rollout.sampler=chain or an "
                         "estimator that declares none")
    torch.manual_seed(cfg.run.seed)
    np.random.seed(cfg.run.seed)
    ckpt, refused = None, None
    if ctx.is_main:
        try:
            ckpt = prepare_run_dir(cfg, run_dir, resume, force_resume=force_resume, launch=launch)
        except ConfigError as exc:  # the other ranks wait in the broadcast: tell them, then stop everywhere
            refused = str(exc)
    ckpt, refused = ctx.broadcast_object((ckpt, refused))  # every rank resumes from the checkpoint rank 0 found
    if refused is not None:
        raise ConfigError(refused)
    # LoRA / float32 masters / FSDP2; an engine copy per rank (and in one process with masters)
    policy = trained_policy(load_policy(cfg.policy), cfg, ctx)
    optimizer = make_optimizer(policy.model, cfg.update.lr, cfg.update.weight_decay)
    scorers = make_scorers(cfg, policy)  # before the checkpoint restores the RNG (a critic head draws)
    dp = ctx if ctx.distributed else None
    state = load_checkpoint(ckpt, policy.model, optimizer, dp=dp) if ckpt else TrainState()
    if ckpt and ctx.is_main:
        _log_resume(cfg, ckpt, state)
    check = SyncCheck.from_config(cfg, policy)  # a resumed engine gets the checkpoint's weights, probed
    synced(policy, cfg, check, dp=dp, version=state.policy_version)
    store = TurnStore(run_dir / "store.sqlite") if ctx.is_main else None
    if store is not None:  # replay and the viewer decode this run's ids with it
        store.set_tokenizer(cfg.run.name, resolve_model(cfg.policy.model))
    for scorer in scorers if ckpt else ():  # the scorers continue too (a critic: weights and optimizer state)
        scorer.load(ckpt)
    parts = RunParts(policy, optimizer, store, scorers, dp=dp, sync=check)
    if ckpt and ctx.is_main:
        set_aside_interrupted(parts.store, cfg.run.name, state, state.iteration * episode_id_stride(cfg))
    return parts, state


def _log_resume(cfg: Config, ckpt: Path, state: TrainState) -> None:
    """Say from which checkpoint the run continues, or that it is already complete."""
    log = logging.getLogger(__name__)
    if state.iteration >= cfg.run.iterations:
        log.warning("run %s is complete: %d of %d iteration(s) done (checkpoint %s); nothing to train. Raise "
                    "run.iterations to continue it, or pass --no-resume to start afresh", cfg.run.name,
                    state.iteration, cfg.run.iterations, ckpt)
    else:
        log.info("resuming %s from checkpoint %s: %d iteration(s) done of %d, policy version %d", cfg.run.name,
                 ckpt, state.iteration, cfg.run.iterations, state.policy_version)


def train(cfg: Config, *, resume: bool = True, force_resume: bool = False, launch: Launch | None = None) -> TrainResult:
    """Run (or resume) the training described by ``cfg``; see the module docstring.

    ``resume=False`` (or no checkpoint to resume from) starts fresh: an existing store or
    checkpoints in the run folder are first moved to ``<run>.prev-<timestamp>`` (``set_aside``).
    A resume needs ``cfg`` to match the run's config.yaml apart from
    ``agentrl.train.launches.RESUME_MAY_CHANGE`` (``run.iterations``, eval/save frequency,
    ``log.*``, ...); ``force_resume`` continues with any change (logged). ``launch`` (the
    config file and overrides) is recorded in the run's ``launches.jsonl``.

    Raises:
        ConfigError: a resume with another config, not forced (lists the differing keys).
        ConfigError / KeyError / FileNotFoundError: bad config, unknown names, missing model.
            ``cfg`` is checked against the registries first (``agentrl.train.checks.check_config``),
            also when it comes from ``agentrl.config.load_config``, which consults none.
        ValueError: the run folder is in use by another ``agentrl train`` (``RunLock``).
        ValueError: an unsupported combination (see ``start_run``).
    """
    cfg = check_config(cfg)  # idempotent: a config checked by the CLI comes back equal
    run_dir = Path(cfg.run.out_dir) / cfg.run.name
    ctx = DistContext.from_env(cfg.policy.device)  # torchrun: joins the process group; else one process
    ended = False
    try:
        check_distributed(cfg, ctx)
        # the held-out panel before any weights load: a panel larger than its split fails here
        panel = eval_panel(cfg) if ctx.is_main and cfg.env.eval_panel_size and (
            cfg.run.eval_every or cfg.run.eval_before) else None
        if ctx.distributed and ctx.is_main:
            logging.getLogger(__name__).info("data-parallel run: %d ranks (%s, FSDP2), %s, rank 0 writes %s",
                                             ctx.world_size, ctx.backend, "every rank rolls out its share" if
                                             rolls_out_on_ranks(cfg, ctx) else "rank 0 rolls out", run_dir)
        with RunLock(run_dir) if ctx.is_main else nullcontext():  # one job per run folder
            parts, state = start_run(cfg, run_dir, resume, ctx, force_resume=force_resume, launch=launch)
            evals: list[EvalResult] = []
            try:
                state = _loop(parts, state, cfg, run_dir, evals, panel)
            finally:
                parts.close()
        ended = True
    finally:
        ctx.close(wait=ended)  # a normal end: every rank finishes before any tears the group down
    return TrainResult(run_dir=run_dir, store_path=run_dir / "store.sqlite", run_id=cfg.run.name, state=state,
                       evals=tuple(evals), is_main=ctx.is_main)


def _held_out(parts: RunParts, cfg: Config, panel: Panel, when: str, label: str) -> EvalResult:
    """Greedy evaluation on the panel; the episodes go to the run's store as ``<run>/eval-<when>``."""
    run_id = fresh_run_id(parts.store, f"{cfg.run.name}{EVAL_RUN}{when}")
    result, _ = evaluate(parts.policy.engine, parts.policy.renderer, cfg, greedy=True, store=parts.store,
                         run_id=run_id, panel=panel, label=label)
    return result


def _loop(parts: RunParts, state: TrainState, cfg: Config, run_dir: Path, evals: list[EvalResult],
          panel: Panel | None = None) -> TrainState:
    """The iterations of ``train`` from ``state.iteration`` on; returns the final state.
    Data-parallel: every rank iterates; rank 0 alone evaluates, logs and writes metrics."""
    sinks = make_logger(cfg.log, run_dir, run_name=cfg.run.name, config=to_dict(cfg), console_keys=CONSOLE_KEYS) \
        if parts.is_main else nullcontext()
    with sinks as logger:
        if parts.is_main and panel is not None:
            record_panel(run_dir, panel)  # warns when the panel's content changed since the run began
            if cfg.run.eval_before and state.iteration == 0:
                evals.append(_held_out(parts, cfg, panel, "before", "before"))
                logger.log(0, evals[-1].as_metrics())
        if state.iteration < cfg.run.iterations:
            parts.start_engines(cfg, state.iteration)  # data-parallel: gathers the weights for rank 0's workers
        for it in range(state.iteration, cfg.run.iterations):
            out = run_iteration(parts, cfg, it)
            state = TrainState(iteration=it + 1, optimizer_steps=state.optimizer_steps + len(out.stats),
                               policy_version=parts.policy.engine.policy_version,
                               episodes_stored=state.episodes_stored + len(out.episodes))
            if parts.is_main:
                metrics = iteration_metrics(out)
                if parts.engines is not None:  # engine workers restarted so far (a health metric)
                    metrics["rollout/engine_restarts"] = float(parts.engines.restarts)
                if panel is not None and cfg.run.eval_every and (it + 1) % cfg.run.eval_every == 0:
                    result = _held_out(parts, cfg, panel, f"iter{it + 1}", f"iter {it + 1}")
                    evals.append(result)
                    metrics.update(result.as_metrics())
                logger.log(it + 1, metrics)
                logger.log_samples(it + 1, sample_turns(out.episodes, None if out.table is None else out.table.turn_id,
                                                        out.advantages))  # TensorBoard text / W&B table
                parts.store.add_metrics(cfg.run.name, it + 1, metrics)  # the same number as logger.log's step
            if (cfg.run.save_every and (it + 1) % cfg.run.save_every == 0) or it + 1 == cfg.run.iterations:
                save_checkpoint(run_dir, parts.policy.model, parts.optimizer, state, dp=parts.dp,
                                extra=_scorers_saver(parts.scorers))
    return state


def _scorers_saver(scorers: list[StepScorer]):
    """``save_checkpoint``'s ``extra``: every step scorer saves itself into the folder (None: none)."""
    return (lambda folder: [scorer.save(folder) for scorer in scorers]) if scorers else None

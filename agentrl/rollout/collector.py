"""Group collection: G rollouts per task with identical env seeds, batched generation.

``collect`` plays ``n_groups × group_size`` episodes on an ``EnvPool``: group ``g`` uses
env seed ``seed + g`` for all its episodes; episode ids are ``g * group_size + j``. Each
round, the prompts of the *active* episodes only (finished ones generate nothing) go to
the engine in one batched call (chunks of ``max_batch``), the parsed actions go to the
pool in one ``step``. When an episode ends its slot takes the next queued episode. It
returns the episodes (the caller writes the store). An env that declares
``metadata["agentrl.reset_member"]`` is reset with ``options["agentrl.member"] = [j, G]``
(``reset_options``; ``agentrl.env.contract``). No torch here.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Callable, Protocol

import numpy as np

from agentrl.env.contract import INFO_TASK, META_RESET_MEMBER, OPTION_MEMBER
from agentrl.env.guards import DEFAULT_MAX_OBSERVATION_CHARS
from agentrl.env.pool import EnvPool
from agentrl.env.registry import action_normalization, env_metadata
from agentrl.llm.base import LLMClient, SamplingParams, turn_seed
from agentrl.llm.chat import ChatRenderer
from agentrl.rollout.agent_loop import EpisodeDriver, LoopConfig
from agentrl.rollout.jobs import LazyQueue
from agentrl.rollout.progress import PhaseProgress
from agentrl.types import Episode


@dataclass(frozen=True)
class CollectConfig:
    """What to collect.

    Attributes:
        env_id: registered env id.
        n_groups: number of tasks (groups), ≥ 1.
        group_size: rollouts per task (G), ≥ 1.
        seed: base env seed (group g → ``seed + g``) and sampler seed.
        loop: the agent-loop configuration.
        sampling: sampling parameters (``max_tokens`` per turn; clamped to the context).
        env_kwargs: env constructor kwargs.
        num_slots: parallel env slots (default: all episodes at once).
        num_workers: env worker processes (default: EnvPool's).
        step_timeout_s / reset_timeout_s: env timeouts in seconds.
        max_observation_chars: the longest observation an env may answer, characters
            (``env.max_observation_chars``; longer: the episode is env_error).
        max_batch: most prompts per engine call (default: all active).
        return_hidden: store the final-layer hidden state per turn (BiPACE).
        run_id: stamped on episodes and turns.
        progress: show the phase's progress (a rich bar on a terminal, plain lines in a log:
            ``agentrl.rollout.progress``).
        groups: play only these group indices (a shard; ids and seeds as in the full plan),
            or None for all ``n_groups``.
        turn_seeds: sample every (episode, turn) from its own seed ``turn_seed(sampling.seed,
            episode_id, t)`` (``SamplingParams.row_seeds``) instead of one seed per batch, so
            an episode's tokens do not depend on the batch it was generated in (the same
            episodes whatever the sharding over engine workers). Needs ``sampling.seed``.
        tasks: ``(task_id, env seed)`` per group (a panel, ``agentrl.eval``): group g resets
            with ``options={"task_id": tasks[g][0]}`` and seed ``tasks[g][1]`` instead of
            seed ``seed + g``; None lets the env draw the task from the seed.
    Raises:
        ValueError: non-positive counts, group indices out of range, ``turn_seeds`` without
            a sampling seed, ``tasks`` not one per group.
    """

    env_id: str
    n_groups: int
    group_size: int = 1
    seed: int = 0
    loop: LoopConfig = field(default_factory=LoopConfig)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    env_kwargs: dict = field(default_factory=dict)
    num_slots: int | None = None
    num_workers: int | None = None
    step_timeout_s: float = 30.0
    reset_timeout_s: float = 120.0
    max_observation_chars: int = DEFAULT_MAX_OBSERVATION_CHARS
    max_batch: int | None = None
    return_hidden: bool = False
    run_id: str = ""
    progress: bool = True
    groups: tuple[int, ...] | None = None
    turn_seeds: bool = False
    id_offset: int = 0
    group_offset: int = 0
    tasks: tuple[tuple[str, int], ...] | None = None

    def __post_init__(self) -> None:
        if self.n_groups < 1 or self.group_size < 1:
            raise ValueError(f"n_groups and group_size must be >= 1, got {self.n_groups}, {self.group_size}")
        if self.num_slots is not None and self.num_slots < 1 or self.max_batch is not None and self.max_batch < 1:
            raise ValueError("num_slots and max_batch must be >= 1 when given")
        if self.groups is not None:
            object.__setattr__(self, "groups", tuple(int(g) for g in self.groups))
            if not self.groups or any(not 0 <= g < self.n_groups for g in self.groups):
                raise ValueError(f"groups must be a non-empty subset of range({self.n_groups}), got {self.groups}")
        if self.turn_seeds and self.sampling.seed is None:
            raise ValueError("turn_seeds needs a sampling seed (SamplingParams.seed)")
        if self.tasks is not None:
            object.__setattr__(self, "tasks", tuple((str(t), int(s)) for t, s in self.tasks))
            if len(self.tasks) != self.n_groups:
                raise ValueError(f"tasks holds {len(self.tasks)} (task_id, seed) pairs for {self.n_groups} groups")

    def pool_kwargs(self) -> dict:
        """``EnvPool`` / ``RayEnvPool`` keyword arguments of this config (env kwargs, workers,
        timeouts, the observation cap)."""
        return {"env_kwargs": self.env_kwargs, "num_workers": self.num_workers, "step_timeout_s": self.step_timeout_s,
                "reset_timeout_s": self.reset_timeout_s, "max_observation_chars": self.max_observation_chars}

    @property
    def n_episodes(self) -> int:
        """Episodes of the full plan (``n_groups × group_size``)."""
        return self.n_groups * self.group_size

    @property
    def n_played(self) -> int:
        """Episodes this config plays (those of ``groups`` when given)."""
        return self.n_episodes if self.groups is None else len(self.groups) * self.group_size


def iter_planned(cfg: CollectConfig, env_id: str) -> Iterator[Episode]:
    """Empty episodes in id order, generated lazily: group g, member j → id
    ``id_offset + g*G + j``, group id ``group_offset + g``, seed ``seed + g`` (only the groups
    of ``cfg.groups`` when given)."""
    groups = range(cfg.n_groups) if cfg.groups is None else sorted(set(cfg.groups))
    return (
        Episode(episode_id=cfg.id_offset + g * cfg.group_size + j, group_id=cfg.group_offset + g, env_id=env_id,
                task_id=cfg.tasks[g][0] if cfg.tasks else "", seed=cfg.tasks[g][1] if cfg.tasks else cfg.seed + g,
                run_id=cfg.run_id)
        for g in groups
        for j in range(cfg.group_size)
    )


def wants_member(env_id: str) -> bool:
    """Whether ``env_id``'s class declares ``metadata["agentrl.reset_member"]`` (its resets then get
    ``options["agentrl.member"]``; ``agentrl.env.contract``)."""
    return bool(env_metadata(env_id).get(META_RESET_MEMBER, False))


def reset_options(task_id: str, member: tuple[int, int] | None) -> dict | None:
    """The reset options of one episode: ``{"task_id": task_id}`` when a task is named, plus
    ``{"agentrl.member": [j, G]}`` when ``member`` is given (only for envs that ``wants_member``);
    None when neither."""
    out: dict = {INFO_TASK: task_id} if task_id else {}
    if member is not None:
        out[OPTION_MEMBER] = [int(member[0]), int(member[1])]
    return out or None


def member_of(cfg: CollectConfig, episode: Episode) -> tuple[int, int]:
    """``(j, G)`` of a planned episode: its index in its group (ids ``id_offset + g*G + j``) and
    ``G = cfg.group_size``."""
    return (episode.episode_id - cfg.id_offset) % cfg.group_size, cfg.group_size


def plan_episodes(cfg: CollectConfig, env_id: str) -> list[Episode]:
    """``iter_planned`` as a list."""
    return list(iter_planned(cfg, env_id))


class CollectHooks(Protocol):
    """What a long-lived caller (an asynchronous engine worker, ``agentrl.rollout.engines.stream``)
    plugs into ``collect``: more episodes while it runs, and a say over weight loads."""

    def next_plan(self) -> CollectConfig | None:
        """Called when a slot is free and the queue is empty: another plan to admit (same env,
        env kwargs, loop and sampling apart from the seeds as ``cfg``; its own ids via
        ``id_offset``), or None for none now."""
        ...

    def may_admit(self, n_active: int) -> bool:
        """Called before episodes are admitted into free slots, with the number still playing;
        False holds admission (e.g. draining before a weight load)."""
        ...

    def before_round(self) -> None:
        """Called before each batched generation round (e.g. to load newer weights)."""
        ...


def collect(
    engine: LLMClient,
    renderer: ChatRenderer,
    cfg: CollectConfig,
    *,
    pool: EnvPool | None = None,
    on_episode: Callable[[Episode], None] | None = None,
    hooks: CollectHooks | None = None,
    keep: bool = True,
) -> list[Episode]:
    """Play all episodes of ``cfg`` and return them in episode-id order.

    Args:
        engine: the policy (any ``LLMClient``).
        renderer: chat renderer of the policy's tokenizer.
        cfg: what to collect.
        pool: an open pool with ≥ ``num_slots`` slots (default: one is opened and closed here).
        on_episode: called with each episode as it finishes (finish order).
        hooks: ``CollectHooks`` of a long-lived caller: the plans it adds are played too and
            reported through ``on_episode`` only (not returned: such a collect may last the
            whole run); None plays ``cfg`` only.
        keep: False reports the episodes through ``on_episode`` only and returns ``[]``: the
            plan is generated as slots free up, so memory stays bounded for any plan length
            (``agentrl rollout --episodes 10**12``).
    Returns:
        ``list[Episode]`` sorted by ``episode_id`` (``[]`` with ``keep=False``); failed
        episodes carry their status.
    Raises:
        ValueError: a plan from ``hooks.next_plan`` for another env or env kwargs.
    """
    n_slots = min(cfg.num_slots or cfg.n_played, cfg.n_played)
    fresh_prefix_cache(engine)
    own = pool is None
    if own:
        pool = EnvPool(cfg.env_id, n_slots, **cfg.pool_kwargs())
    try:
        with PhaseProgress("rollout", cfg.n_played, enabled=cfg.progress) as bar:
            return _run(engine, renderer, cfg, pool, min(n_slots, pool.n), on_episode,
                        lambda n, k: bar.advance(n, turns=k), hooks, keep)
    finally:
        if own:
            pool.close()


def _run(engine, renderer, cfg, pool, n_slots, on_episode, tick, hooks=None, keep=True) -> list[Episode]:
    planned = iter_planned(cfg, pool.env_id)
    episodes = list(planned) if keep else []
    normalize = action_normalization(pool.env_id)  # what the env asks of its actions (default: exact)
    members = wants_member(pool.env_id)  # the env wants [j, G] at reset
    # (episode, its plan's base seed for turn seeds, (j, G) in its group), drawn lazily as slots free up
    queue = LazyQueue((e, cfg.sampling.seed, member_of(cfg, e)) for e in (episodes if keep else planned))
    free = list(range(n_slots))[::-1]
    active: dict[int, EpisodeDriver] = {}
    seed_of: dict[int, int | None] = {}  # slot → the base seed of the plan its episode belongs to
    n_turns, rnd = 0, 0

    def more() -> None:
        plan = hooks.next_plan() if hooks is not None and free and not queue else None
        if plan is None:
            return
        if plan.env_id != cfg.env_id or plan.env_kwargs != cfg.env_kwargs:
            raise ValueError(f"collect: a hooked plan for {plan.env_id} {plan.env_kwargs} cannot play on the pool of "
                             f"{cfg.env_id} {cfg.env_kwargs}; start another collect for it")
        # reported through on_episode only, not returned: a streaming collect may run for the whole run
        queue.extend((e, plan.sampling.seed, member_of(plan, e)) for e in iter_planned(plan, pool.env_id))

    def finish(slot: int) -> None:
        drv = active.pop(slot)
        free.append(slot)
        if on_episode is not None:
            on_episode(drv.episode)
        tick(1, n_turns)

    def admit() -> None:
        more()
        if hooks is not None and not hooks.may_admit(len(active)):
            return
        starting, options = {}, []
        while free and queue:
            slot, (ep, seed_of[slot], member) = free.pop(), queue.popleft()
            starting[slot] = EpisodeDriver(ep, renderer, cfg.loop, engine.max_context, normalize)
            options.append(reset_options(ep.task_id, member if members else None))
        if not starting:
            return
        results = pool.reset(list(starting), [d.episode.seed for d in starting.values()],
                             options if any(options) else None)
        for slot, drv in starting.items():
            active[slot] = drv
            res = results[slot]
            drv.episode.task_id = str(res.info.get("task_id", drv.episode.seed))
            drv.start(res)
            if drv.done:
                finish(slot)

    admit()
    while active:
        if hooks is not None:
            hooks.before_round()
        slots = sorted(active)
        completions = _generate(engine, [active[s].prompt() for s in slots], cfg, rnd,
                                [active[s].allowed() for s in slots],
                                [(seed_of[s], active[s].episode.episode_id, len(active[s].episode.turns))
                                 for s in slots])
        rnd += 1
        actions = {s: active[s].act(c) for s, c in zip(slots, completions)}
        results = pool.step(actions)
        n_turns += len(slots)
        for s in slots:
            if active[s].observe(results[s]):
                finish(s)
        tick(0, n_turns)
        admit()
    return episodes


def fresh_prefix_cache(engine: LLMClient) -> None:
    """Empty the engine's prefix KV cache, when it has one (``HFEngine.reset_prefix_cache``).

    A collect then depends only on the weights and its own calls, not on what earlier
    collects left cached (a resumed run samples bit for bit as an uninterrupted one: cached
    and recomputed keys/values agree only within float rounding).
    """
    reset = getattr(engine, "reset_prefix_cache", None)
    if callable(reset):
        reset()


def _generate(engine: LLMClient, prompts: list, cfg: CollectConfig, rnd: int, allowed: list | None = None,
              keys: list[tuple[int, int, int]] | None = None):
    """Batched generation in chunks; the sampler seed is derived from (seed, round, chunk),
    or with ``cfg.turn_seeds`` each prompt gets ``turn_seed`` of its (plan seed, episode id, t)
    in ``keys``. ``allowed`` (one entry per prompt, None = unconstrained) is passed to the
    engine only when some prompt is constrained."""
    step = cfg.max_batch or len(prompts)
    constrained = allowed is not None and any(a is not None for a in allowed)
    if constrained:
        _check_supports_allowed(engine)
    out = []
    for i in range(0, len(prompts), step):
        seed = None if cfg.sampling.seed is None else cfg.sampling.seed * 1_000_003 + rnd * 1_009 + i
        kw = {"allowed": allowed[i : i + step]} if constrained else {}
        sampling = replace(cfg.sampling, seed=seed)
        if cfg.turn_seeds:
            sampling = replace(sampling, row_seeds=tuple(turn_seed(b, e, t) for b, e, t in keys[i : i + step]))
        out += engine.generate(prompts[i : i + step], sampling, return_hidden=cfg.return_hidden, **kw)
    return out


def _check_supports_allowed(engine: LLMClient) -> None:
    """Raise ``ValueError`` when the engine's ``generate`` has no ``allowed`` keyword."""
    try:
        params = inspect.signature(engine.generate).parameters
    except (TypeError, ValueError):
        return
    if "allowed" not in params and not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        raise ValueError(f"{type(engine).__name__} does not support constrained decoding (generate has no 'allowed'); "
                         f"use policy.engine=hf or policy.action_constraint=none")

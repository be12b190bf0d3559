"""Tree rollouts: chains of turns that branch from other chains' nodes (no torch).

A *chain* is one stored ``Episode``: either a root chain (reset → end) or a branch that
continues another chain from one of its turns (its turns start at ``t0`` and its first
turn's parent is the node it branches from, ``Turn.info["tree_parent"] = [episode_id, t]``
and, once stored, ``parent_turn_id``). ``play_chains`` plays many chains at once on an
``EnvPool`` with one batched engine call per round, like ``collect``; a branch's env state
is rebuilt by seeded prefix replay (``agentrl.rollout.branching``) and its agent context
is a copy of the parent's, so its first prompt is the parent's exact next prompt.

``sample_trees`` is Tree-GRPO's sampler (ALGORITHMS.md §7.1; Ji et al., arXiv 2509.21240):
M trees per task, L expansion rounds of N branches per tree from nodes drawn uniformly
with replacement among the root and the non-leaf nodes (seeded), then K leaves per tree
kept and everything off their root paths pruned. Each node is one full agent turn; every
turn records ``info["tree"]``. ``add_linked`` stores chains parents first, filling
``parent_turn_id`` of each branch's first turn.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from agentrl.config import TreeConfig
from agentrl.env.pool import EnvPool
from agentrl.env.registry import action_normalization
from agentrl.llm.base import LLMClient
from agentrl.llm.chat import ChatRenderer
from agentrl.rollout.agent_loop import EpisodeDriver
from agentrl.rollout.branching import EnvTrace, fork_driver, replay_prefix, snapshot_driver
from agentrl.rollout.collector import CollectConfig, _generate, fresh_prefix_cache, reset_options, wants_member
from agentrl.store import TurnStore
from agentrl.failures import with_context
from agentrl.types import Episode, EpisodeStatus

PARENT_KEY = "tree_parent"  # Turn.info key on a branch's first turn: [parent episode id, parent t]


@dataclass
class Chain:
    """One chain being played (see module docstring).

    Attributes:
        episode: the Episode filled turn by turn (its turns start at ``t0``).
        driver: the agent loop of this chain.
        t0: index of the chain's first turn in its root-to-leaf path.
        trace: for a branch, the env prefix to replay; None for a root chain (reset).
        tree: tree id written to ``info["tree"]`` (-1: none).
        parent: ``(episode_id, t)`` of the node it branches from, or None.
        actions / observations: the env history from reset (prefix included); raw
            observation texts, ``observations[0]`` after reset.
        states: ``states[i]`` = driver snapshot before turn ``t0 + i``.
        tokens: completion tokens generated for this chain.
        options: the reset options of the chain's root (``options["agentrl.member"]`` for an env
            that wants it: ``sample_trees`` gives tree m of M the member ``[m, M]``); a branch
            replays its prefix with them.
    """

    episode: Episode
    driver: EpisodeDriver
    t0: int = 0
    trace: EnvTrace | None = None
    tree: int = -1
    parent: tuple[int, int] | None = None
    actions: list[str] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    states: list[EpisodeDriver] = field(default_factory=list)
    tokens: int = 0
    options: dict | None = None

    @property
    def ok(self) -> bool:
        """Finished with status ok and at least one turn."""
        return self.episode.status == EpisodeStatus.OK and bool(self.episode.turns)

    def branch(self, i: int, episode: Episode) -> "Chain":
        """A new chain continuing after this chain's local turn ``i`` (``i < len(turns)``)."""
        k = self.t0 + i + 1
        return Chain(episode=episode, driver=fork_driver(self.states[i + 1], episode, k), t0=k,
                     trace=EnvTrace(self.episode.seed, tuple(self.actions[:k]), tuple(self.observations[: k + 1]),
                                    self.options),
                     tree=self.tree, parent=(self.episode.episode_id, k - 1),
                     actions=list(self.actions[:k]), observations=list(self.observations[: k + 1]),
                     options=self.options)

    def finalize(self) -> None:
        """Write ``tree`` / ``tree_parent`` into the turns' info."""
        for tr in self.episode.turns:
            if self.tree >= 0:
                tr.info["tree"] = self.tree
        if self.parent is not None and self.episode.turns:
            self.episode.turns[0].info[PARENT_KEY] = list(self.parent)


def root_chain(episode: Episode, renderer: ChatRenderer, cc: CollectConfig, max_context: int, tree: int = -1,
               member: tuple[int, int] | None = None) -> Chain:
    """A chain that starts from ``reset(episode.seed)`` (with ``options["agentrl.member"] = member``
    when given and the env wants it, ``collector.wants_member``)."""
    driver = EpisodeDriver(episode, renderer, cc.loop, max_context, action_normalization(cc.env_id))
    options = reset_options("", member if member is not None and wants_member(cc.env_id) else None)
    return Chain(episode=episode, driver=driver, tree=tree, options=options)


def _start(pool: EnvPool, starting: dict[int, Chain]) -> list[int]:
    """Reset root chains, replay branch prefixes; returns the slots that failed at once."""
    roots = {s: c for s, c in starting.items() if c.trace is None}
    options = [c.options for c in roots.values()]
    results = pool.reset(list(roots), [c.episode.seed for c in roots.values()],
                         options if any(options) else None) if roots else {}
    results.update(replay_prefix(pool, {s: c.trace for s, c in starting.items() if c.trace is not None}))
    dead = []
    for s, c in starting.items():
        res = results[s]
        if c.trace is None:
            c.episode.task_id = str(res.info.get("task_id", c.episode.seed))
            c.observations = [res.obs]
            c.driver.start(res)
        elif res.error:
            c.driver.fail(EpisodeStatus.ENV_ERROR, with_context("branch prefix replay failed: ", res.error))
        if c.driver.done:
            dead.append(s)
        else:
            c.states.append(snapshot_driver(c.driver))
    return dead


def play_chains(engine: LLMClient, cc: CollectConfig, pool: EnvPool, chains: list[Chain], rnd: int = 0) -> int:
    """Play ``chains`` to the end on ``pool`` (all its slots), batching every round's prompts.

    Args:
        engine / cc: the policy and the collection settings (sampling, loop, max_batch,
            return_hidden). The sampler seed of round r derives from ``(cc.sampling.seed, r)``.
        rnd: first round index (pass the previous return value so that successive calls
            never reuse a sampler seed).
    Returns:
        The next round index.
    """
    queue, free, active = deque(chains), list(range(pool.n))[::-1], {}

    def admit() -> None:
        starting = {}
        while free and queue:
            starting[free.pop()] = queue.popleft()
        if starting:
            dead = _start(pool, starting)
            free.extend(dead)
            active.update({s: c for s, c in starting.items() if s not in dead})

    admit()
    while active:
        slots = sorted(active)
        drivers = [active[s].driver for s in slots]
        completions = _generate(engine, [d.prompt() for d in drivers], cc, rnd, [d.allowed() for d in drivers])
        rnd += 1
        actions = {s: active[s].driver.act(c) for s, c in zip(slots, completions)}
        results = pool.step(actions)
        for s, comp in zip(slots, completions):
            c = active[s]
            c.tokens += int(np.asarray(comp.token_ids).size)
            c.actions.append(actions[s])
            c.observations.append(results[s].obs)
            if c.driver.observe(results[s]):
                del active[s]
                free.append(s)
            else:
                c.states.append(snapshot_driver(c.driver))
        admit()
    return rnd


# --------------------------------------------------------------------------- Tree-GRPO


@dataclass(frozen=True)
class TreeRollout:
    """What ``sample_trees`` returns.

    Attributes:
        episodes: the stored chains (after pruning), parents before children.
        generated_tokens: completion tokens sampled, pruned chains included (int, tokens).
        complete: complete trajectories sampled (ok leaves before pruning).
        kept_leaves: leaves left after pruning.
        n_trees: trees grown.
    """

    episodes: list[Episode]
    generated_tokens: int
    complete: int
    kept_leaves: int
    n_trees: int


def tree_episode_stride(n_groups: int, tc: TreeConfig) -> int:
    """Most chains one ``sample_trees`` call creates: groups × M × (1 + L·N)."""
    return n_groups * tc.trees * (1 + tc.rounds * tc.branches)


def _pick_nodes(chains: list[Chain], n: int, rng: np.random.Generator) -> list[tuple[Chain | None, int]]:
    """N draws with replacement among the root (None) and the non-leaf nodes of one tree."""
    cands: list[tuple[Chain | None, int]] = [(None, -1)]
    cands += [(c, i) for c in chains if c.ok for i in range(len(c.episode.turns) - 1)]
    return [cands[int(k)] for k in rng.integers(len(cands), size=n)]


def _prune(chains: list[Chain], k: int | None, rng: np.random.Generator) -> tuple[list[Chain], int]:
    """Keep K sampled leaves (one per ok chain) and their root paths; returns the kept
    chains (partially kept ones truncated) and the number of kept leaves."""
    leaves = [c for c in chains if c.ok]
    if k is not None and len(leaves) > k:
        leaves = [leaves[int(i)] for i in rng.choice(len(leaves), size=k, replace=False)]
    keep = {id(c): len(c.episode.turns) for c in leaves}
    by_id = {c.episode.episode_id: c for c in chains}
    for c in leaves:
        while c.parent is not None:
            p = by_id[c.parent[0]]
            keep[id(p)] = max(keep.get(id(p), 0), c.parent[1] - p.t0 + 1)
            c = p
    for c in chains:  # failed chains stay visible when the node they branch from is kept
        if not c.ok and (c.parent is None or keep.get(id(by_id[c.parent[0]]), 0) > c.parent[1] - by_id[c.parent[0]].t0):
            keep[id(c)] = len(c.episode.turns)
    out = []
    for c in chains:
        n = keep.get(id(c), 0)
        if n == 0 and c.ok:
            continue
        if n < len(c.episode.turns):
            del c.episode.turns[n:]
            c.episode.turns[-1].info["pruned_after"] = True
        out.append(c)
    return out, len(leaves)


def sample_trees(engine: LLMClient, renderer: ChatRenderer, cc: CollectConfig, tc: TreeConfig, *,
                 iteration: int = 0, pool: EnvPool | None = None) -> TreeRollout:
    """Grow ``tc.trees`` trees for each of ``cc.n_groups`` tasks (``cc.group_size`` is unused).

    Task g uses env seed ``cc.seed + g`` and group id ``iteration·n_groups + g``; chains get
    episode ids from ``iteration · tree_episode_stride`` on, trees the id ``group·M + m``. An env
    that wants group members (``collector.wants_member``) resets every root of tree m with
    ``options["agentrl.member"] = [m, M]``; branches replay with their root's options.
    Node draws and leaf sampling use ``np.random.default_rng((cc.seed, iteration))``.

    Returns:
        ``TreeRollout``; store its episodes with ``add_linked``.
    """
    rng = np.random.default_rng([cc.seed, iteration])
    fresh_prefix_cache(engine)
    g0, next_id = iteration * cc.n_groups, iteration * tree_episode_stride(cc.n_groups, tc)
    n_slots = cc.num_slots or cc.n_groups * tc.trees * max(1, tc.branches)
    own = pool is None
    pool = pool or EnvPool(cc.env_id, n_slots, **cc.pool_kwargs())
    trees: list[list[Chain]] = []

    def episode(g: int, task: str = "") -> Episode:
        nonlocal next_id
        next_id += 1
        return Episode(episode_id=next_id - 1, group_id=g0 + g, env_id=cc.env_id, task_id=task, seed=cc.seed + g,
                       run_id=cc.run_id)

    try:
        for g in range(cc.n_groups):
            trees += [[root_chain(episode(g), renderer, cc, engine.max_context, (g0 + g) * tc.trees + m,
                                  (m, tc.trees))]
                      for m in range(tc.trees)]
        rnd = play_chains(engine, cc, pool, [c for t in trees for c in t])
        for _ in range(tc.rounds):
            new = []
            for t, chains in enumerate(trees):
                g = t // tc.trees
                for c, i in _pick_nodes(chains, tc.branches, rng):
                    child = (root_chain(episode(g), renderer, cc, engine.max_context, chains[0].tree,
                                        (t % tc.trees, tc.trees)) if c is None
                             else c.branch(i, episode(g, c.episode.task_id)))
                    chains.append(child)
                    new.append(child)
            rnd = play_chains(engine, cc, pool, new, rnd)
    finally:
        if own:
            pool.close()
    tokens = sum(c.tokens for t in trees for c in t)
    complete = sum(c.ok for t in trees for c in t)
    kept, n_leaves = [], 0
    for chains in trees:
        out, n = _prune(chains, tc.leaves, rng)
        kept += out
        n_leaves += n
    for c in kept:
        c.finalize()
    return TreeRollout([c.episode for c in kept], tokens, complete, n_leaves, len(trees))


# --------------------------------------------------------------------------- storing


def add_linked(store: TurnStore, episodes: list[Episode], *, run_id: str, iteration: int | None = None) -> None:
    """Store episodes whose first turn may branch from another episode's turn
    (``info["tree_parent"] = [episode_id, t]``), parents first, setting each branch's
    first ``parent_turn_id`` to its parent's stored turn id. Plain chains: one
    ``add_episodes`` call. ``iteration``: the trainer iteration storing them (``add_episodes``).

    Raises:
        ValueError: a parent episode is neither in ``episodes`` nor stored, or has no turn t.
    """
    pending, done = list(episodes), {}
    while pending:
        ids = {e.episode_id for e in pending}
        ready = [e for e in pending if not e.turns or PARENT_KEY not in e.turns[0].info
                 or e.turns[0].info[PARENT_KEY][0] not in ids]
        if not ready:
            raise ValueError("add_linked: the episodes' tree_parent references form a cycle")
        for e in ready:
            if e.turns and PARENT_KEY in e.turns[0].info:
                pe, pt = e.turns[0].info[PARENT_KEY]
                if pe not in done:
                    done[pe] = {tr.t: tr.turn_id for tr in store.turns(pe, run_id)}
                if pt not in done[pe]:
                    raise ValueError(f"episode {e.episode_id} branches from episode {pe} turn t={pt}, which is not "
                                     f"stored for run {run_id!r}; store parents first")
                e.turns[0].parent_turn_id = done[pe][pt]
        store.add_episodes(ready, run_id=run_id, iteration=iteration)
        for e in ready:
            done[e.episode_id] = {tr.t: tr.turn_id for tr in e.turns}
        pending = [e for e in pending if e.episode_id not in done]

"""RTPO's sparse reverse trees and reverse-turn schedule (ALGORITHMS.md §9.2, PROPOSED; no torch).

One iteration (``run_rtpo_iteration``):

1. sample ``group_size`` base trajectories τ⁰ per task (chains, ``agentrl.rollout.tree``);
2. branch points of a base with T turns: b_j = T − 1 − j·s for j = 0..B−1 (b_j ≥ 0);
3. round j = 0, 1, …: for every base with a j-th branch point, sample K − 1 continuations
   from the exact context before turn b_j (same prompt ids, env rebuilt by seeded prefix
   replay) with the *current* policy, then call ``update_fn`` — the trainer stores them,
   computes the RTPO advantage and updates the policy (and bumps its version) before the
   next round. So the continuations of the earlier branch point b − s are sampled with the
   policy updated on branch point b ("on-policy continuation").

Table layout (what ``agentrl.credit.rtpo`` expects): every continuation is its own
episode whose first turn has t = b (``info["tree_parent"]`` → the base's turn b − 1);
``info["branch"]`` is the branch-group id on the K sibling branching turns (the base's
turn b and every continuation's first turn), unique over the run. The schedule is recorded
in ``info["rtpo"] = {"round": j, "branch_turn": b, "sampled_at": policy version}`` on the
branching turns, so it can be audited (and tested) from the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from agentrl.config import TreeConfig
from agentrl.env.pool import EnvPool
from agentrl.llm.base import LLMClient
from agentrl.llm.chat import ChatRenderer
from agentrl.rollout.collector import CollectConfig
from agentrl.rollout.tree import Chain, play_chains, root_chain
from agentrl.types import Episode


@dataclass(frozen=True)
class RtpoRound:
    """One reverse-turn round handed to the trainer's ``update_fn``.

    Attributes:
        index: round j (0 = the last turns of the bases).
        new_episodes: episodes to store now (round 0: the bases too), parents first.
        episodes: the episodes of this round's TurnTable: the bases and this round's
            continuations (other rounds' branching turns are singleton groups there → 0).
        branch_ids: the branch groups sampled in this round.
        policy_version: the engine's version when this round was sampled.
    """

    index: int
    new_episodes: tuple[Episode, ...]
    episodes: tuple[Episode, ...]
    branch_ids: tuple[int, ...]
    policy_version: int


def rtpo_episode_stride(n_groups: int, group_size: int, tc: TreeConfig) -> int:
    """Most episodes one iteration creates: groups × bases × (1 + B·(K − 1))."""
    return n_groups * group_size * (1 + tc.branch_points * (tc.siblings - 1))


def branch_turns(n_turns: int, tc: TreeConfig) -> list[int]:
    """b_j = T − 1 − j·s for j < B with b_j ≥ 0 (decreasing)."""
    return [b for b in range(n_turns - 1, -1, -tc.stride)][: tc.branch_points]


def _mark(turn, branch: int, rnd: int, b: int, version: int) -> None:
    turn.info["branch"] = branch
    turn.info["rtpo"] = {"round": rnd, "branch_turn": b, "sampled_at": version}


def run_rtpo_iteration(engine: LLMClient, renderer: ChatRenderer, cc: CollectConfig, tc: TreeConfig,
                       update_fn: Callable[[RtpoRound], None], *, iteration: int = 0,
                       pool: EnvPool | None = None) -> list[Episode]:
    """Sample and train one RTPO iteration (module docstring, §9.2).

    Args:
        engine / renderer / cc: the policy and collection settings (``cc.group_size`` bases
            per task; task g → env seed ``cc.seed + g``, group ``iteration·n_groups + g``).
        tc: ``stride`` s, ``siblings`` K, ``branch_points`` B.
        update_fn: called once per round, in reverse-turn order, after that round's
            continuations are sampled; it must update the policy before returning.
        iteration: used for unique episode ids (``iteration · rtpo_episode_stride`` on) and
            branch ids (``base episode id · B + j``).
        pool: an open pool (default: one opened and closed here).
    Returns:
        Every episode of the iteration (bases first, then continuations by round).
    """
    g0 = iteration * cc.n_groups
    next_id = iteration * rtpo_episode_stride(cc.n_groups, cc.group_size, tc)
    own = pool is None
    pool = pool or EnvPool(cc.env_id, cc.num_slots or cc.n_episodes * (tc.siblings - 1), **cc.pool_kwargs())
    try:
        bases = [root_chain(Episode(episode_id=next_id + k, group_id=g0 + k // cc.group_size, env_id=cc.env_id,
                                    task_id="", seed=cc.seed + k // cc.group_size, run_id=cc.run_id),
                            renderer, cc, engine.max_context, member=(k % cc.group_size, cc.group_size))
                 for k in range(cc.n_episodes)]
        next_id += cc.n_episodes
        version = engine.policy_version
        rnd = play_chains(engine, cc, pool, bases)
        points = _mark_bases(bases, tc, version)
        out, stored = [c.episode for c in bases], False
        for j in range(tc.branch_points):
            todo = [c for c in bases if len(points[id(c)]) > j]
            if not todo:
                break
            version = engine.policy_version
            conts, ids = _continuations(todo, [points[id(c)][j] for c in todo], j, tc, next_id)
            next_id += len(conts)
            rnd = play_chains(engine, cc, pool, conts, rnd)
            for k, ch in enumerate(conts):
                ch.finalize()
                if ch.episode.turns:
                    _mark(ch.episode.turns[0], ids[k // (tc.siblings - 1)], j, ch.t0, version)
                for tr in ch.episode.turns:
                    tr.info.setdefault("rtpo_round", j)
            new = tuple(ch.episode for ch in conts)
            update_fn(RtpoRound(j, new if stored else tuple(out) + new, tuple(c.episode for c in bases) + new,
                                tuple(ids), version))
            stored = True
            out += new
        if not stored:  # no base has a branch point (all failed): store them, nothing to train
            update_fn(RtpoRound(0, tuple(out), tuple(out), (), version))
    finally:
        if own:
            pool.close()
    return out


def _mark_bases(bases: list[Chain], tc: TreeConfig, version: int) -> dict[int, list[int]]:
    """Branch turns of each base (by ``id(chain)``), marked in its turns' info."""
    points = {id(c): branch_turns(len(c.episode.turns), tc) if c.ok else [] for c in bases}
    for c in bases:
        for j, b in enumerate(points[id(c)]):
            _mark(c.episode.turns[b], c.episode.episode_id * tc.branch_points + j, j, b, version)
    return points


def _continuations(todo: list[Chain], turns: list[int], j: int, tc: TreeConfig,
                   next_id: int) -> tuple[list[Chain], list[int]]:
    """K − 1 continuation chains per base in ``todo`` (branch turn ``turns[i]``), and the
    branch id of each base's group."""
    conts, ids = [], []
    for c, b in zip(todo, turns):
        ids.append(c.episode.episode_id * tc.branch_points + j)
        for _ in range(tc.siblings - 1):
            ep = Episode(episode_id=next_id + len(conts), group_id=c.episode.group_id, env_id=c.episode.env_id,
                         task_id=c.episode.task_id, seed=c.episode.seed, run_id=c.episode.run_id)
            conts.append(_continuation(c, b, ep))
    return conts, ids


def _continuation(base: Chain, b: int, episode: Episode) -> Chain:
    """A continuation of ``base`` from the context before its turn ``b``."""
    if b == 0:  # the context before the first turn: a fresh reset gives the same prompt
        ch = base.branch(-1, episode)
        ch.parent = None
        return ch
    return base.branch(b - 1, episode)

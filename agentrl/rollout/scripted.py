"""Model-free policies and their rollout loop over an ``EnvPool``.

``RandomPolicy`` samples uniformly from ``info["admissible_actions"]`` with its own seeded
generator; ``WalkthroughPolicy`` follows ``info["walkthrough"]`` from reset;
``NoisyWalkthroughPolicy`` follows it with random slips (mixed outcomes). ``run_scripted``
plays a ``RolloutRequest`` with them: turns carry no tokens (``prompt_ids``/``completion_ids``
empty), so these episodes are for testing envs, the store and the estimators, and for
baselines (random success rate, walkthrough upper bound).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Callable

import numpy as np

from agentrl.env.contract import (INFO_ADMISSIBLE, INFO_ANCHOR, INFO_ENV_ERROR, INFO_TASK, INFO_VALID, INFO_WALKTHROUGH,
                                  INFO_WON, META_RESET_MEMBER, META_WALKTHROUGH_KWARGS, OPTION_MEMBER, milestone_info)
from agentrl.rollout.jobs import LazyQueue
from agentrl.rollout.request import RolloutRequest
from agentrl.types import Episode, EpisodeStatus, Turn


#: slip probability of the ``noisy_walkthrough`` policy
NOISY_EPSILON = 0.25


class RandomPolicy:
    """Uniform choice among the admissible actions.

    Args:
        seed: seed (int or sequence of ints) of the policy's ``np.random.Generator``.
    """

    def __init__(self, seed: int | tuple[int, ...]) -> None:
        self.rng = np.random.default_rng(seed)

    def act(self, obs: str, info: dict) -> str | None:
        """An admissible action, or ``None`` when the env lists none (the episode stops).

        Raises:
            ValueError: the env provides no ``admissible_actions`` key at all.
        """
        if INFO_ADMISSIBLE not in info:
            raise ValueError(f"the random policy needs info[{INFO_ADMISSIBLE!r}], which this env does not provide; "
                             f"use --policy walkthrough or an LLM policy")
        actions = list(info[INFO_ADMISSIBLE])
        return str(actions[self.rng.integers(len(actions))]) if actions else None


class WalkthroughPolicy:
    """Replays the expert plan the env gave at reset, one action per turn.

    Args:
        reset_info: the reset ``info``; must hold ``walkthrough`` (list of str).
    Raises:
        ValueError: the env gives no walkthrough.
    """

    def __init__(self, reset_info: dict) -> None:
        plan = reset_info.get(INFO_WALKTHROUGH)
        if plan is None:
            raise ValueError(f"the walkthrough policy needs info[{INFO_WALKTHROUGH!r}] at reset, which this env "
                             f"does not provide; use --policy random")
        self.plan = deque(str(a) for a in plan)

    def act(self, obs: str, info: dict) -> str | None:
        """The next planned action, or ``None`` when the plan is used up."""
        return self.plan.popleft() if self.plan else None


class NoisyWalkthroughPolicy:
    """The walkthrough with slips: each turn, with probability ``epsilon`` a uniformly random
    admissible action instead of the next planned one (the plan waits; a slip that moved the
    agent can make the rest of the plan fail). Outcomes are mixed by construction, with known
    good and bad turns: the batches the expert-Q credit check (``agentrl.env.expert``) needs
    where an untrained LLM never wins.

    Args:
        reset_info: the reset ``info``; must hold ``walkthrough``.
        seed: seed of the slips' ``np.random.Generator``.
        epsilon: slip probability in [0, 1].
    Raises:
        ValueError: no walkthrough, or ``epsilon`` outside [0, 1].
    """

    def __init__(self, reset_info: dict, seed: int | tuple[int, ...], epsilon: float = NOISY_EPSILON) -> None:
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
        self.plan, self.random, self.epsilon = WalkthroughPolicy(reset_info), RandomPolicy(seed), float(epsilon)

    def act(self, obs: str, info: dict) -> str | None:
        """A random admissible action with probability ``epsilon`` (when the env lists some),
        else the next planned one; ``None`` when the plan is used up."""
        if not self.plan.plan:
            return None
        if info.get(INFO_ADMISSIBLE) and self.random.rng.random() < self.epsilon:
            return self.random.act(obs, info)
        return self.plan.act(obs, info)


def make_policy(name: str, reset_info: dict, seed: int,
                episode_id: int) -> RandomPolicy | WalkthroughPolicy | NoisyWalkthroughPolicy:
    """The policy object for one episode (random and slips: seeded by ``(seed, episode_id)``)."""
    if name == "random":
        return RandomPolicy((seed, episode_id))
    if name == "walkthrough":
        return WalkthroughPolicy(reset_info)
    if name == "noisy_walkthrough":
        return NoisyWalkthroughPolicy(reset_info, (seed, episode_id))
    raise ValueError(f"unknown scripted policy {name!r}; use 'random', 'walkthrough' or 'noisy_walkthrough'")


@dataclass
class _Live:
    """An episode being played in one slot."""

    episode: Episode
    policy: RandomPolicy | WalkthroughPolicy | NoisyWalkthroughPolicy
    obs: str
    info: dict


def _jobs(req: RolloutRequest) -> Iterator[tuple[int, int, int]]:
    """``(episode_id, group_id, env_seed)`` for every episode, groups in order, generated
    lazily (a rollout of 10**12 episodes holds only the jobs in its slots, issue 20 item 9)."""
    return ((e, e // req.group, req.seed + e // req.group) for e in range(req.episodes))


def env_kwargs_for(policy: str, env_id: str, kwargs: Mapping) -> dict:
    """The env constructor kwargs scripted ``policy`` plays under: for ``walkthrough``, the
    env's declared ``metadata["agentrl.walkthrough_kwargs"]`` (e.g. ALFWorld's
    ``{"expert": True}``) under the caller's ``kwargs``; else ``kwargs`` unchanged."""
    if policy not in ("walkthrough", "noisy_walkthrough"):
        return dict(kwargs)
    from agentrl.env.registry import env_metadata

    return {**dict(env_metadata(env_id).get(META_WALKTHROUGH_KWARGS) or {}), **dict(kwargs)}


def _close(live: _Live, status: EpisodeStatus = EpisodeStatus.OK, error: str = "") -> Episode:
    ep = live.episode
    ep.status, ep.error = status, error
    return ep


def _turn(live: _Live, action: str, res, max_turns: int) -> Turn:
    ep = live.episode
    t = len(ep.turns)
    cut = not res.terminated and t + 1 >= max_turns
    return Turn(
        run_id="", episode_id=ep.episode_id, group_id=ep.group_id, t=t, observation=live.obs,
        anchor_obs=str(live.info.get(INFO_ANCHOR, live.obs)), action=action,
        action_valid=bool(res.info.get(INFO_VALID, True)), reward=float(res.reward),
        terminated=bool(res.terminated), truncated=bool(res.truncated or cut),
        next_anchor_obs=str(res.info.get(INFO_ANCHOR, res.obs)),
        info={INFO_WON: bool(res.info.get(INFO_WON, False)), **milestone_info(res.info)},
    )


def run_scripted(req: RolloutRequest, on_episode: Callable[[Episode], None]) -> None:
    """Play ``req`` with a scripted policy in an ``EnvPool``; ``on_episode`` gets each
    finished episode (status ``env_error`` with the reason when the env failed).

    An episode ends when the env terminates/truncates, after ``req.max_turns`` turns
    (last turn marked ``truncated``) or when the policy has no action left (last turn
    marked ``truncated``). Episode ``e`` is member ``e % req.group`` of group ``e // req.group``;
    an env declaring ``metadata["agentrl.reset_member"]`` gets ``options["agentrl.member"] =
    [e % group, group]`` at reset.
    Raises:
        KeyError: unknown env id. ValueError: the env lacks what the policy needs.
        EnvPoolError: the env cannot be constructed.
    """
    from agentrl.env.pool import EnvPool

    from agentrl.env.registry import env_metadata

    jobs = LazyQueue(_jobs(req))
    n_slots = min(req.num_slots or 8, req.episodes)
    env_kwargs = env_kwargs_for(req.policy, req.env_id, req.env_kwargs)
    members = bool(env_metadata(req.env_id).get(META_RESET_MEMBER, False))
    with EnvPool(req.env_id, n_slots, env_kwargs=env_kwargs, num_workers=req.num_workers,
                 step_timeout_s=req.step_timeout_s, max_observation_chars=req.max_observation_chars) as pool:
        live: dict[int, _Live] = {}
        _start(pool, req, jobs, list(range(n_slots)), live, on_episode, members)
        while live:
            actions: dict[int, str] = {}
            for slot, lv in list(live.items()):
                action = lv.policy.act(lv.obs, lv.info)
                if action is None:
                    if lv.episode.turns:
                        lv.episode.turns[-1].truncated = not lv.episode.turns[-1].terminated
                    on_episode(_close(live.pop(slot)))
                else:
                    actions[slot] = action
            free = [s for s in range(n_slots) if s not in live and s not in actions]
            results = pool.step(actions) if actions else {}
            for slot, res in results.items():
                lv = live[slot]
                error = res.error or res.info.get(INFO_ENV_ERROR)  # the env's own report (e.g. a remote server died)
                if error:
                    on_episode(_close(live.pop(slot), EpisodeStatus.ENV_ERROR, str(error)))
                    free.append(slot)
                    continue
                turn = _turn(lv, actions[slot], res, req.max_turns)
                lv.episode.turns.append(turn)
                lv.obs, lv.info = res.obs, res.info
                if turn.terminated or turn.truncated:
                    on_episode(_close(live.pop(slot)))
                    free.append(slot)
            _start(pool, req, jobs, sorted(free), live, on_episode, members)


def _start(pool, req: RolloutRequest, jobs: LazyQueue, slots: list[int], live: dict[int, _Live],
           on_episode: Callable[[Episode], None], members: bool = False) -> None:
    """Reset free ``slots`` with the next jobs (``options["agentrl.member"]`` when ``members``);
    a failed reset is an env_error episode."""
    while slots and jobs:
        batch = []
        while slots and jobs:
            batch.append((slots.pop(0), jobs.popleft()))
        options = [{OPTION_MEMBER: [job[0] % req.group, req.group]} for _, job in batch] if members else None
        results = pool.reset([s for s, _ in batch], [job[2] for _, job in batch], options)
        for slot, (eid, gid, env_seed) in batch:
            res = results[slot]
            ep = Episode(episode_id=eid, group_id=gid, env_id=req.env_id, task_id=str(env_seed), seed=env_seed)
            if res.error is not None:
                ep.status, ep.error = EpisodeStatus.ENV_ERROR, res.error
                on_episode(ep)
                slots.append(slot)
                continue
            ep.task_id = str(res.info.get(INFO_TASK, env_seed))
            live[slot] = _Live(ep, make_policy(req.policy, res.info, req.seed, eid), res.obs, res.info)

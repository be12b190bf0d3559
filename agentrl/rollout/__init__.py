"""agentrl.rollout — env × policy → ``Episode``s (layer L3).

Owns: the agent loop and group collection (LLM policies), tree branching, and the
model-free policies of ``scripted`` (random over admissible actions, expert walkthrough).
May import ``agentrl.env``, ``agentrl.llm``, ``agentrl.types``, ``agentrl.registry``; never
the store (train / cli / proxy write Episodes to it) and never torch directly.

This ``__init__`` stays import-light: it holds the request that ``agentrl rollout`` builds
and ``get_runner``, which maps a policy name to the function that plays the episodes.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Protocol

from agentrl.types import Episode

#: Policies that need no model (``agentrl.rollout.scripted``).
SCRIPTED_POLICIES = ("random", "walkthrough")

#: Module and function that run LLM policies (any other policy name); added by the LLM rollout.
LLM_RUNNER = ("agentrl.rollout.llm_runner", "run_llm_rollout")


@dataclass(frozen=True)
class RolloutRequest:
    """What ``agentrl rollout`` asks for: ``episodes`` episodes in groups of ``group``.

    Group ``g`` (0-based) plays env seed ``seed + g`` in all its ``group`` episodes
    (identical task per group); episode ids run 0..episodes-1, group ids 0..episodes/group-1.

    Attributes:
        env_id: registered env id, e.g. ``"agentrl/Toy-v0"``.
        policy: ``"random"``, ``"walkthrough"`` or an LLM policy name (e.g. a model id).
        episodes: total number of episodes (a multiple of ``group``).
        group: episodes per group (G ≥ 1).
        seed: base seed of env seeds and policy randomness.
        max_turns: turns per episode before it is cut (last turn ``truncated``).
        env_kwargs: env constructor kwargs (e.g. ``{"split": "valid_seen"}``).
        num_slots: parallel env slots (default: min(episodes, 8)).
        num_workers: env worker processes (default: EnvPool's choice).
        step_timeout_s: seconds one env step may take before the episode is an env error.
    Raises:
        ValueError: non-positive counts or ``episodes`` not a multiple of ``group``.
    """

    env_id: str
    policy: str
    episodes: int
    group: int = 1
    seed: int = 0
    max_turns: int = 50
    env_kwargs: dict = field(default_factory=dict)
    num_slots: int | None = None
    num_workers: int | None = None
    step_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if self.episodes < 1 or self.group < 1 or self.max_turns < 1:
            raise ValueError(f"episodes, group and max_turns must be >= 1 (got {self.episodes}, {self.group}, "
                             f"{self.max_turns})")
        if self.episodes % self.group:
            raise ValueError(f"episodes ({self.episodes}) must be a multiple of group ({self.group}); "
                             f"e.g. --episodes {self.episodes - self.episodes % self.group or self.group}")


class Runner(Protocol):
    """Plays a request and hands each finished episode to ``on_episode`` (in finish order)."""

    def __call__(self, request: RolloutRequest, on_episode: Callable[[Episode], None]) -> None: ...


def get_runner(policy: str) -> Runner:
    """The runner of ``policy``: ``scripted.run_scripted`` for random/walkthrough, else the
    LLM runner ``LLM_RUNNER``.

    Raises:
        ValueError: an LLM policy while the LLM runner is not available.
    """
    if policy in SCRIPTED_POLICIES:
        from agentrl.rollout.scripted import run_scripted

        return run_scripted
    module, name = LLM_RUNNER
    try:
        return getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        raise ValueError(
            f"policy {policy!r} is not one of the model-free policies {SCRIPTED_POLICIES}; LLM policies need "
            f"the LLM rollout ({module}.{name}) and the llm extra (pip install 'agentrl[llm]'), which this "
            f"installation lacks. Use --policy random or --policy walkthrough"
        ) from None

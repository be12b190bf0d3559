"""What ``agentrl rollout`` asks for (``RolloutRequest``) and what plays it (``Runner``).

The bottom of the rollout room's request path: ``agentrl.rollout`` (``get_runner``), the
model-free runner (``scripted``) and the LLM runner (``llm_runner``) all import the request
from here, so no runner reads it back from the package that picks the runner.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

from agentrl.env.guards import DEFAULT_MAX_OBSERVATION_CHARS
from agentrl.types import Episode

__all__ = ["RolloutRequest", "Runner"]


@dataclass(frozen=True)
class RolloutRequest:
    """What ``agentrl rollout`` asks for: ``episodes`` episodes in groups of ``group``.

    Group ``g`` (0-based) plays env seed ``seed + g`` in all its ``group`` episodes
    (identical task per group); episode ids run 0..episodes-1, group ids 0..episodes/group-1.

    Attributes:
        env_id: registered env id, e.g. ``"agentrl/Toy-v0"``.
        policy: ``"random"``, ``"walkthrough"``, ``"noisy_walkthrough"`` or an LLM policy name (e.g. a model id).
        episodes: total number of episodes (a multiple of ``group``).
        group: episodes per group (G ≥ 1).
        seed: base seed of env seeds and policy randomness.
        max_turns: turns per episode before it is cut (last turn ``truncated``).
        env_kwargs: env constructor kwargs (e.g. ``{"split": "valid_seen"}``).
        num_slots: parallel env slots (default: min(episodes, 8)).
        num_workers: env worker processes (default: EnvPool's choice).
        step_timeout_s: seconds one env step may take before the episode is an env error.
        max_observation_chars: the longest observation an env may answer, characters (longer:
            the episode is an env error, ``agentrl.env.guards``).
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
    max_observation_chars: int = DEFAULT_MAX_OBSERVATION_CHARS

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

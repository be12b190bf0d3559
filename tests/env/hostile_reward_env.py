"""Test-only env whose answers break the TextEnv contract on demand (imported by spawned env
workers through the entry point ``hostile_reward_env:HostileEnv``).

``bad`` picks the broken answer: ``nan`` / ``inf`` / ``-inf`` rewards, a ``str`` reward ("1.0"),
``None``, a ``bool``, a two-value array, a reward of 1e9 outside the declared range
``metadata["agentrl.reward_range"] = (-1, 1)``, a ``bytes`` observation, or a 5 000-character
observation. Episodes whose env seed is even give the broken answer on their first step; odd
seeds answer correctly (reward 1.0, terminated, won) — so a group or an iteration holds both.
The one admissible action is ``go`` (constrained decoding emits only it).
"""

from __future__ import annotations

import gymnasium
import numpy as np

from agentrl.env import text_spaces

HOSTILE_ID = "agentrl-test/Hostile-v0"
BAD = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf"), "str": "1.0", "none": None, "bool": True,
       "array": np.array([1.0, 2.0]), "range": 1e9}
#: bad name -> the cause the pools must report (agentrl.failures.FAILURE_CAUSES)
CAUSE = {"nan": "reward_not_finite", "inf": "reward_not_finite", "-inf": "reward_not_finite",
         "str": "reward_not_numeric", "none": "reward_not_numeric", "bool": "reward_not_numeric",
         "array": "reward_not_numeric", "range": "reward_out_of_range", "bytes": "observation_not_text",
         "huge": "observation_too_large"}


class HostileEnv(gymnasium.Env):
    metadata = {"render_modes": [], "agentrl.reward_range": (-1.0, 1.0)}

    def __init__(self, bad: str = "nan", max_turns: int = 2) -> None:
        if bad not in CAUSE:
            raise ValueError(f"bad must be one of {sorted(CAUSE)}, got {bad!r}")
        self.observation_space, self.action_space = text_spaces()
        self.bad, self.seed_ = bad, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.seed_ = int(seed or 0)
        return "Say go.", {"anchor_obs": "start", "won": False, "task_id": f"h{self.seed_}",
                           "admissible_actions": ["go"]}

    def step(self, action: str):
        info = {"anchor_obs": "end", "won": True, "action_valid": True, "admissible_actions": ["go"]}
        if self.seed_ % 2:
            return "done", 1.0, True, False, info
        info["won"] = False
        if self.bad == "bytes":
            return b"done", 1.0, True, False, info
        if self.bad == "huge":
            return "x" * 5000, 1.0, True, False, info
        return "done", BAD[self.bad], True, False, info


class BadRangeEnv(HostileEnv):
    """Declares a reward range with low > high: the pool must refuse to start."""

    metadata = {"render_modes": [], "agentrl.reward_range": (1.0, -1.0)}


BAD_RANGE_ID = "agentrl-test/HostileBadRange-v0"


def register() -> None:
    """Register ``HOSTILE_ID`` and ``BAD_RANGE_ID`` in this process's gymnasium registry (idempotent)."""
    if HOSTILE_ID not in gymnasium.registry:
        gymnasium.register(id=HOSTILE_ID, entry_point="hostile_reward_env:HostileEnv")
    if BAD_RANGE_ID not in gymnasium.registry:
        gymnasium.register(id=BAD_RANGE_ID, entry_point="hostile_reward_env:BadRangeEnv")

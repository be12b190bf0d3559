"""Test-only env for branching: a toy game whose step observations carry a counter that is
never reset, so replaying a prefix gives different observations (a non-deterministic env).
Imported by spawned pool workers through ``trees_fake_envs:DriftingToyEnv``."""

from __future__ import annotations

import gymnasium

from agentrl_envs.toy.env import ToyEnv

DRIFT_ID = "agentrl-test/DriftingToy-v0"


class DriftingToyEnv(ToyEnv):
    """``ToyEnv`` whose step observation ends with `` [call k]``, k counting every step
    this instance ever took (across resets)."""

    calls = 0

    def step(self, action: str):
        obs, reward, term, trunc, info = super().step(action)
        self.calls += 1
        return f"{obs} [call {self.calls}]", reward, term, trunc, info


def register() -> None:
    """Register ``DRIFT_ID`` (idempotent)."""
    if DRIFT_ID not in gymnasium.registry:
        gymnasium.register(id=DRIFT_ID, entry_point="trees_fake_envs:DriftingToyEnv")


DENSE_ID = "agentrl-test/DenseToy-v0"


class DenseToyEnv(ToyEnv):
    """``ToyEnv`` with a dense shaping reward: +0.5 for every valid ``go east`` (so sibling
    continuations of a random policy get different returns)."""

    def step(self, action: str):
        obs, reward, term, trunc, info = super().step(action)
        bonus = 0.5 if info.get("action_valid") and action.strip() == "go east" else 0.0
        return obs, reward + bonus, term, trunc, info


def register_dense() -> None:
    """Register ``DENSE_ID`` (idempotent)."""
    if DENSE_ID not in gymnasium.registry:
        gymnasium.register(id=DENSE_ID, entry_point="trees_fake_envs:DenseToyEnv")

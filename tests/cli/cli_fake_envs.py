"""Tiny envs for the CLI tests (imported by EnvPool workers through a string entry point)."""

from __future__ import annotations

import gymnasium


class FlakyEnv(gymnasium.Env):
    """Three-step corridor whose step 2 raises for odd seeds (an env crash)."""

    def __init__(self) -> None:
        self.observation_space = gymnasium.spaces.Text(100)
        self.action_space = gymnasium.spaces.Text(100)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.seed_, self.t = seed, 0
        return "start", {"anchor_obs": "s0", "admissible_actions": ["left", "right"], "won": False,
                         "task_id": f"flaky-{seed}", "walkthrough": ["right", "right", "right"]}

    def step(self, action):
        self.t += 1
        if self.t == 2 and self.seed_ % 2 == 1:
            raise RuntimeError("flaky env exploded")
        won = self.t == 3
        return (f"at {self.t}", 1.0 if won else 0.0, won, False,
                {"anchor_obs": f"s{self.t}", "admissible_actions": ["left", "right"], "won": won,
                 "action_valid": True})

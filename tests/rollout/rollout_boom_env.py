"""Test-only env for the agent loop: the action ``boom`` raises inside the env worker,
anything else is valid and echoes the step count; never ends on its own."""

from __future__ import annotations

import gymnasium

from agentrl.env import text_spaces

BOOM_ID = "agentrl-test/RolloutBoom-v0"


class BoomEnv(gymnasium.Env):
    metadata = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space, self.action_space = text_spaces()
        self.k = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.k = 0
        return "Say anything but boom.", {"anchor_obs": "start", "won": False, "task_id": f"boom{seed}"}

    def step(self, action: str):
        if action == "boom":
            raise RuntimeError("boom")
        self.k += 1
        return f"step {self.k}", 0.5, False, False, {"anchor_obs": f"s{self.k}", "won": False, "action_valid": True}


def register() -> None:
    if BOOM_ID not in gymnasium.registry:
        gymnasium.register(id=BOOM_ID, entry_point="rollout_boom_env:BoomEnv")

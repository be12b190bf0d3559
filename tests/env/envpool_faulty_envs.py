"""Test-only envs for EnvPool crash isolation. Imported by spawned workers through the
entry point ``envpool_faulty_envs:FaultyEnv`` (this directory is on sys.path under pytest,
and spawned children inherit the parent's sys.path)."""

from __future__ import annotations

import os
import time

import gymnasium

from agentrl.env import text_spaces

FAULTY_ID = "agentrl-test/Faulty-v0"


class FaultyEnv(gymnasium.Env):
    """Counts steps; the action ``raise`` raises, ``hang`` sleeps for an hour, ``die`` kills
    the worker process (os._exit), anything else echoes ``"<pid> step <k>: <action>"``.

    The observation carries the worker pid so tests can see restarts."""

    metadata = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space, self.action_space = text_spaces()
        self.k = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.k = 0
        obs = f"{os.getpid()} reset seed={seed}"
        return obs, {"anchor_obs": obs, "won": False, "task_id": str(seed)}

    def step(self, action: str):
        if action == "raise":
            raise ValueError("boom from FaultyEnv")
        if action == "hang":
            time.sleep(3600)
        if action == "die":
            os._exit(3)
        self.k += 1
        obs = f"{os.getpid()} step {self.k}: {action}"
        return obs, float(self.k), False, False, {"anchor_obs": obs, "won": False, "action_valid": True}


def register() -> None:
    """Register ``FAULTY_ID`` in this process's gymnasium registry (idempotent)."""
    if FAULTY_ID not in gymnasium.registry:
        gymnasium.register(id=FAULTY_ID, entry_point="envpool_faulty_envs:FaultyEnv")

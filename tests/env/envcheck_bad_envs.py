"""Test-only envs that each break one TextEnv contract rule (for check_env's own tests).
Registered under ``agentrl-test/`` so ``list_ids()`` (prefix ``agentrl/``) never sees them."""

from __future__ import annotations

import itertools

import gymnasium

from agentrl.env import text_spaces

_counter = itertools.count()


class GoodEnv(gymnasium.Env):
    """A minimal valid text env: ``ok`` wins, anything else is invalid; 3-turn limit."""

    metadata = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space, self.action_space = text_spaces()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return "start", {"anchor_obs": "start", "won": False, "task_id": "t0",
                         "admissible_actions": ["ok"], "walkthrough": ["ok"]}

    def _obs(self, action: str) -> str:
        return "done" if action == "ok" else "Nothing happens."

    def step(self, action):
        self.t += 1
        won = action == "ok"
        obs = self._obs(action)
        return obs, float(won), won, (not won and self.t >= 3), {
            "anchor_obs": obs, "won": won, "action_valid": won, "admissible_actions": ["ok"]}


class BytesObsEnv(GoodEnv):
    def _obs(self, action):
        return b"bytes"


class BothFlagsEnv(GoodEnv):
    def step(self, action):
        obs, r, _, _, info = super().step(action)
        return obs, r, True, True, info


class NondeterministicEnv(GoodEnv):
    def _obs(self, action):
        return f"tick {next(_counter)}"


class GarbageRaisesEnv(GoodEnv):
    def step(self, action):
        if not action.isascii():
            raise UnicodeError("cannot encode")
        return super().step(action)


class GarbageValidEnv(GoodEnv):
    def step(self, action):
        obs, r, term, trunc, info = super().step(action)
        return obs, r, term, trunc, {**info, "action_valid": True}


class BadWalkthroughEnv(GoodEnv):
    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return obs, {**info, "walkthrough": ["nope"]}


class CloseTwiceRaisesEnv(GoodEnv):
    closed = False

    def close(self):
        if self.closed:
            raise RuntimeError("already closed")
        self.closed = True


class MissingKeyEnv(GoodEnv):
    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        del info["task_id"]
        return obs, info


class UnknownNormalizeEnv(GoodEnv):
    metadata = {"render_modes": [], "agentrl.action_normalize": "lowercase"}


class NormalizeHidesActionEnv(GoodEnv):
    """Asks for whitespace normalisation but lists an action it would change."""

    metadata = {"render_modes": [], "agentrl.action_normalize": "whitespace"}

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return obs, {**info, "admissible_actions": ["ok", "buy  2 | 3"]}


class InstructionsListEnv(GoodEnv):
    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return obs, {**info, "instructions": ["say ok"]}


BAD = {  # class name -> a phrase check_env's error must contain
    "BytesObsEnv": "obs must be str",
    "BothFlagsEnv": "both True",
    "NondeterministicEnv": "not deterministic",
    "GarbageRaisesEnv": "raised UnicodeError",
    "GarbageValidEnv": "action_valid=True",
    "BadWalkthroughEnv": "walkthrough",
    "CloseTwiceRaisesEnv": "not idempotent",
    "MissingKeyEnv": "lacks required keys ['task_id']",
    "UnknownNormalizeEnv": "'lowercase' is not one of ['exact', 'whitespace']",
    "NormalizeHidesActionEnv": "admissible actions ['buy  2 | 3'] change under",
    "InstructionsListEnv": "reset info['instructions'] must be str",
}


def register_all() -> None:
    """Register GoodEnv and every BAD env as ``agentrl-test/<Name>-v0`` (idempotent)."""
    for name in ["GoodEnv", *BAD]:
        env_id = f"agentrl-test/{name}-v0"
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=f"envcheck_bad_envs:{name}")

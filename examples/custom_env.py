"""Write, register and check your own text env: ``mypkg/GuessNumber-v0``.

Run it as a script to check the env against the TextEnv contract and play its
walkthrough::

    python examples/custom_env.py

or import it (``import custom_env``) to register the id in this process. The env is a
``gymnasium.Env`` whose spaces are ``UnicodeText`` and whose ``info`` carries the contract
keys (``agentrl/env/contract.py``): ``anchor_obs`` (state text without history),
``admissible_actions``, ``won``, ``action_valid`` (step), ``task_id``, ``walkthrough`` and
``instructions`` (reset; the agent's system prompt shows them where ``policy.system_prompt``
says ``{env_instructions}``). It accepts the ``split`` and ``max_turns`` kwargs that ``agentrl.train`` passes
to every env, so a config can train on it once it is registered with an importable
string entry point (training steps envs in spawned ``EnvPool`` worker processes). Its
classmethod ``list_tasks(split)`` names every task of a split with a digest of its content
(``agentrl.env.tasks``): held-out panels are drawn from it, and the constructor checks that
train and eval share no task.
"""

from __future__ import annotations

import gymnasium

from agentrl.env import (INFO_ADMISSIBLE, INFO_ANCHOR, INFO_INSTRUCTIONS, INFO_TASK, INFO_VALID, INFO_WALKTHROUGH,
                         INFO_WON)
from agentrl.env import check_env, make, text_spaces
from agentrl.env.tasks import TaskRef, check_split_disjoint, content_digest

ENV_ID = "mypkg/GuessNumber-v0"


class GuessNumberEnv(gymnasium.Env):
    """Find a secret integer in ``1..high`` by guessing; the env answers "higher"/"lower".

    Actions are ``"guess K"`` with K inside the range still possible (the admissible
    actions); anything else is ``action_valid=False`` and changes nothing. Reward 1.0 on
    the right guess (terminated, won); ``max_turns`` guesses without it → truncated.
    Splits: ``eval`` holds the secrets divisible by 4, ``train`` the others, ``all`` both;
    ``reset(options={"task_id": "secret<K>"})`` plays secret K of the split.
    Raises ValueError for ``high < 4``, an unknown split or a task id outside the split.
    """

    # check_kwargs: cheap construction for check_env; action_normalize: the agent loop sends
    # "guess  5 " as "guess 5" (a command game; the default "exact" sends actions as written)
    # splits: the values of ``split`` (pre-flight checks a config's split against them)
    metadata = {"render_modes": [], "agentrl.check_kwargs": {"high": 8}, "agentrl.action_normalize": "whitespace",
                "agentrl.splits": ("train", "eval", "all")}

    @staticmethod
    def split_secrets(high: int, split: str) -> list[int]:
        return [s for s in range(1, high + 1) if split == "all" or (s % 4 == 0) == (split == "eval")]

    @classmethod
    def list_tasks(cls, split: str = "all", high: int = 16, **_) -> list[TaskRef]:
        """Every task of ``split``: its id and a digest of its content (here: the secret and range)."""
        return [TaskRef(f"secret{s}", content_digest({"secret": s, "high": high})) for s in cls.split_secrets(high, split)]

    def __init__(self, high: int = 16, max_turns: int = 6, split: str = "all") -> None:
        if high < 4 or split not in ("train", "eval", "all"):
            raise ValueError(f"need high >= 4 and split in train/eval/all, got high={high}, split={split!r}")
        check_split_disjoint(type(self), split, {"high": high})  # train shares no task with eval
        self.secrets = self.split_secrets(high, split)
        self.high, self.max_turns = high, max_turns
        self.observation_space, self.action_space = text_spaces()
        self.lo, self.hi, self.turns, self.done = 1, high, 0, True  # no episode before reset()

    def _state(self) -> str:
        return f"The number is between {self.lo} and {self.hi}."

    def _info(self, won: bool) -> dict:
        adm = [] if self.done else [f"guess {k}" for k in range(self.lo, self.hi + 1)]
        return {INFO_ANCHOR: self._state(), INFO_ADMISSIBLE: adm, INFO_WON: won}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        task = (options or {}).get(INFO_TASK)
        if task and task not in {f"secret{s}" for s in self.secrets}:
            raise ValueError(f"unknown task_id {task!r}; expected 'secret<K>' with K in {self.secrets}")
        self.secret = int(task[6:]) if task else self.secrets[int(self.np_random.integers(len(self.secrets)))]
        self.lo, self.hi, self.turns, self.done = 1, self.high, 0, False
        walk, lo, hi = [], 1, self.high  # the binary search that finds the secret
        while not walk or walk[-1] != f"guess {self.secret}":
            mid = (lo + hi) // 2
            walk.append(f"guess {mid}")
            lo, hi = (mid + 1, hi) if mid < self.secret else (lo, mid - 1)
        info = {**self._info(False), INFO_TASK: f"secret{self.secret}", INFO_WALKTHROUGH: walk,
                INFO_INSTRUCTIONS: "You are guessing a secret number. Each turn write one guess as guess N; the "
                                   "game says whether the secret is higher or lower."}
        return f"Guess the number between 1 and {self.high}. " + self._state(), info

    def step(self, action: str):
        valid = not self.done and isinstance(action, str) and action.strip() in self._info(False)[INFO_ADMISSIBLE]
        won = False
        if valid:
            k = int(action.strip()[6:])
            won = k == self.secret
            if k < self.secret:
                self.lo = k + 1
            elif k > self.secret:
                self.hi = k - 1
            obs = "Correct! You won." if won else ("Higher. " if k < self.secret else "Lower. ") + self._state()
        else:
            obs = "The episode is over; call reset()." if self.done else "Nothing happens. " + self._state()
        self.turns += 0 if self.done else 1
        truncated = not won and not self.done and self.turns >= self.max_turns
        self.done = self.done or won or truncated
        return obs, 1.0 if won else 0.0, won, truncated, {**self._info(won), INFO_VALID: valid}


def register(entry_point: str | type = GuessNumberEnv) -> None:
    """Register ``ENV_ID`` once (idempotent). Pass a string entry point such as
    ``"mypkg.env:GuessNumberEnv"`` when the env must be built in ``EnvPool`` workers."""
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(id=ENV_ID, entry_point=entry_point)


register()


def play_walkthrough(seed: int = 0) -> list[tuple[str, str, float]]:
    """Play the reset walkthrough of seed ``seed``; returns (action, observation, reward) rows."""
    env = make(ENV_ID)
    _, info = env.reset(seed=seed)
    rows = []
    for action in info[INFO_WALKTHROUGH]:
        obs, reward, terminated, truncated, _ = env.step(action)
        rows.append((action, obs, reward))
    env.close()
    return rows


if __name__ == "__main__":
    print(check_env(ENV_ID))
    for action, obs, reward in play_walkthrough(seed=0):
        print(f"> {action:10s} reward={reward:.1f}  {obs}")

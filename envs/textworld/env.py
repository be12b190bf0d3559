"""TextWorld games as agentrl text envs (``agentrl/TextWorld-v0``, ``-CU1-v0``, ``-CC3-v0``).

Wraps TextWorld 1.7's low-level API (``textworld.start`` → ``reset()`` / ``step(cmd) ->
(GameState, score, done)``, ENVIRONMENTS.md §1) in the TextEnv contract:

- the task of a reset is game ``index`` of ``split`` (from ``options["task_index"]`` or
  ``options["task_id"]``, else drawn from the reset seed among ``n_tasks``); games come from ``games.ensure_game``
  (generated once, cached);
- observation = ``anchor_obs`` = the engine's feedback text for the step with the ASCII
  banner and the trailing ``>`` prompt/status line (room name, score/moves counter) removed
  — nothing else is changed; the admissible list is only in ``info``;
- reward = difference of TextWorld's cumulative score; ``terminated`` when the game ends
  (won or lost, ``info["lost"]``), ``truncated`` after ``max_turns`` agent turns;
- ``action_valid`` = the command (lower-cased, whitespace collapsed) is in the admissible
  commands of the state it was issued in. Decision: a non-admissible command is still
  passed to the game (the Inform parser answers, e.g. "That's not a verb I recognise.",
  and synonyms it understands take effect), except text with a line break, a control
  character or non-ASCII, which could inject several commands into the z-machine, or longer
  than ``MAX_COMMAND_CHARS`` (jericho would truncate it silently): it is not sent, the observation is ``REJECTED_FEEDBACK`` and the game state is unchanged.
  Every call counts as a turn.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Mapping

import gymnasium

from agentrl.env import (INFO_ADMISSIBLE, INFO_ANCHOR, INFO_TASK, INFO_VALID, INFO_WALKTHROUGH,
                         INFO_WON, require_module, text_spaces)
from agentrl.env.tasks import TaskRef, check_split_disjoint
from agentrl_envs.textworld.games import SPLIT_SEED_BASE, GameSpec, ParamValue, ensure_game, spec_digest, task_seed
from agentrl_envs.textworld.engine_lock import ENGINE_LOCK

MAX_COMMAND_CHARS = 190  # jericho truncates longer input (198 bytes) silently
REJECTED_FEEDBACK = (f"That command cannot be typed: use one line of plain ASCII text of at most "
                     f"{MAX_COMMAND_CHARS} characters.")
_BANNER_LINE = re.compile(r"^[\s_|\\/$<>]*[_|\\/$][\s_|\\/$<>]*$")
_SENDABLE = re.compile(r"^[\x20-\x7e]{0,%d}$" % MAX_COMMAND_CHARS)


def clean_feedback(text: str) -> str:
    """Engine feedback without the ASCII-art banner and the trailing prompt/status line.

    ``"\\n\\n  ____ ...banner...\\n\\nWelcome ...\\n\\n>      -= Studio =-0/1"`` →
    ``"Welcome ..."``. Only whole banner lines (made of ``_|\\/$<>`` and spaces) and
    everything from the last ``"\\n>"`` on are removed; the result is stripped.
    """
    cut = text.rfind("\n>")
    if cut >= 0:
        text = text[:cut]
    lines = [ln for ln in text.split("\n") if not _BANNER_LINE.match(ln)]
    return "\n".join(lines).strip()


def normalize_command(action: str) -> str:
    """Lower-case, whitespace runs collapsed, stripped (how commands are compared)."""
    return " ".join(action.lower().split())


class TextWorldEnv(gymnasium.Env):
    """One TextWorld game family as a text env (see module docstring).

    Args:
        family: ``tw-make`` family ("custom", "tw-coin_collector", "tw-treasure_hunter",
            "tw-simple", "tw-cooking").
        params: ``tw-make`` options, e.g. ``{"world_size": 2, "nb_objects": 3, "quest_length": 1}``.
        split: "train" or "eval" (disjoint seed ranges, ``games.task_seed``).
        n_tasks: number of games in the split's task pool (≥ 1).
        max_turns: agent turns before truncation.
        cache_dir: game cache root (default ``$AGENTRL_CACHE/textworld``).
        expert: request TextWorld's ``policy_commands`` (the quest's winning commands from the
            current state) on every step, for ``expert_plan`` (``agentrl.env.expert``); off in
            rollouts.
    Raises:
        MissingExtraError: textworld is not installed (``pip install 'agentrl[textworld]'``).
        ValueError: unknown family/split, bad params, n_tasks < 1, max_turns < 1.
    """

    # text-game commands: the loop collapses whitespace before step (matching normalises again)
    metadata = {"render_modes": [], "agentrl.check_kwargs": {"n_tasks": 2}, "agentrl.action_normalize": "whitespace",
                "agentrl.splits": tuple(SPLIT_SEED_BASE), "agentrl.expert_kwargs": {"expert": True}}

    @classmethod
    def list_tasks(cls, split: str = "train", family: str = "custom", params: Mapping[str, ParamValue] | None = None,
                   n_tasks: int = 64, **_: object) -> list[TaskRef]:
        """Task-list hook (``agentrl.env.tasks``): the ``n_tasks`` games of ``split``, each
        digested by its generator spec (family, params, seed) and TextWorld's version
        (``games.spec_digest``); no game is generated."""
        task_seed(split, max(n_tasks, 1) - 1)  # validates split and range
        specs = [GameSpec.make(family, params or {}, task_seed(split, i)) for i in range(n_tasks)]
        return [TaskRef(s.key, spec_digest(s)) for s in specs]

    def __init__(self, family: str = "custom", params: Mapping[str, ParamValue] | None = None,
                 split: str = "train", n_tasks: int = 64, max_turns: int = 50,
                 cache_dir: str | Path | None = None, expert: bool = False) -> None:
        self._tw = require_module("textworld", "textworld")
        if n_tasks < 1 or max_turns < 1:
            raise ValueError(f"n_tasks and max_turns must be >= 1, got {n_tasks}, {max_turns}")
        task_seed(split, n_tasks - 1)  # validates split and range
        GameSpec.make(family, params or {}, 0)  # validates family and params
        check_split_disjoint(type(self), split, {"family": family, "params": params, "n_tasks": n_tasks},
                             tuple(SPLIT_SEED_BASE))
        self.observation_space, self.action_space = text_spaces()
        self.family, self.params, self.split = family, dict(params or {}), split
        self.n_tasks, self.max_turns = n_tasks, max_turns
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._infos = self._tw.EnvInfos(admissible_commands=True, won=True, lost=True, score=True,
                                        max_score=True, objective=True, extras=["walkthrough"],
                                        policy_commands=bool(expert))
        self.expert = bool(expert)
        self._policy: list[str] = []
        self._game: Path | None = None
        self._env = None
        self._done = True

    def game_spec(self, index: int) -> GameSpec:
        """The GameSpec of task ``index`` of this env's split."""
        return GameSpec.make(self.family, self.params, task_seed(self.split, index))

    def _load(self, index: int) -> GameSpec:
        spec = self.game_spec(index)
        game = ensure_game(spec, self.cache_dir)
        if game != self._game:
            if self._env is not None:
                self._env.close()
            with ENGINE_LOCK, warnings.catch_warnings():  # TextWorld is not thread-safe (engine_lock)
                warnings.simplefilter("ignore")  # jericho: "not fully supported" (score via TextWorld)
                self._env = self._tw.start(str(game), request_infos=self._infos)
            self._game = game
        return spec

    def _index_from_options(self, options: dict) -> int | None:
        """``options["task_index"]`` or the index of ``options["task_id"]`` (a ``task_id``
        from an earlier reset of this env's family/params/split). Raises ValueError."""
        if options.get(INFO_TASK) is None:
            return options.get("task_index")
        tid = str(options[INFO_TASK])
        try:
            index = int(tid.rsplit("seed=", 1)[1]) - task_seed(self.split, 0)
            ok = 0 <= index < self.n_tasks and self.game_spec(index).key == tid
        except (IndexError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"task_id {tid!r} is not a task of this env (family {self.family!r}, split "
                             f"{self.split!r}, n_tasks {self.n_tasks}); e.g. {self.game_spec(0).key!r}")
        return index

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        index = self._index_from_options(options or {})
        if index is None:
            index = int(self.np_random.integers(self.n_tasks))
        elif not 0 <= int(index) < self.n_tasks:
            raise ValueError(f"task_index {index} outside [0, n_tasks={self.n_tasks})")
        spec = self._load(int(index))
        with ENGINE_LOCK:
            gs = self._env.reset()
        self._score, self._turns, self._done = gs.score, 0, False
        self._won = self._lost = False
        self._admissible = list(gs.admissible_commands)
        self._admissible_set = {normalize_command(a) for a in self._admissible}
        self._policy = list(gs.policy_commands or []) if self.expert else []
        obs = clean_feedback(gs.feedback)
        info = {INFO_ANCHOR: obs, INFO_ADMISSIBLE: self._admissible, INFO_WON: bool(gs.won),
                "lost": bool(gs.lost), INFO_TASK: spec.key, "task_index": int(index),
                INFO_WALKTHROUGH: list(gs["extra.walkthrough"] or []), "objective": gs.objective,
                "max_score": gs.max_score}
        return obs, info

    def step(self, action: str):
        if self._env is None:
            raise RuntimeError("TextWorldEnv.step called before reset()")
        cmd = action.strip() if isinstance(action, str) else ""
        valid = normalize_command(cmd) in self._admissible_set
        if self._done:
            obs, reward, won, lost, valid = "The game is over; call reset().", 0.0, self._won, self._lost, False
        elif not _SENDABLE.match(cmd):
            obs, reward, won, lost, valid = REJECTED_FEEDBACK, 0.0, False, False, False
        else:
            with ENGINE_LOCK:
                gs, _, done = self._env.step(cmd)
            obs, reward = clean_feedback(gs.feedback), float(gs.score - self._score)
            self._score, won, lost = gs.score, bool(gs.won), bool(gs.lost)
            self._admissible = list(gs.admissible_commands)
            self._admissible_set = {normalize_command(a) for a in self._admissible}
            self._policy = list(gs.policy_commands or []) if self.expert else []
            self._done = bool(done) or won or lost
        self._turns += 1
        terminated = self._done
        truncated = not terminated and self._turns >= self.max_turns
        self._done = self._done or truncated
        self._won, self._lost = won, lost
        info = {INFO_ANCHOR: obs, INFO_ADMISSIBLE: self._admissible, INFO_WON: won, "lost": lost,
                INFO_VALID: valid, "score": self._score}
        return obs, reward, terminated, truncated, info

    def expert_plan(self) -> list[str]:
        """The quest's winning commands from the current state (TextWorld's ``policy_commands``),
        for the expert check (``agentrl.env.expert``); ``[]`` once the game is over.

        Raises:
            RuntimeError: the env was built without ``expert=True``.
        """
        if not self.expert:
            raise RuntimeError("TextWorldEnv.expert_plan needs the env built with expert=True "
                               "(metadata['agentrl.expert_kwargs'])")
        return [] if self._done else list(self._policy)

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
        self._env, self._game = None, None

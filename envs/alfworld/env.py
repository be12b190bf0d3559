"""``agentrl/ALFWorld-v0``: the ALFWorld text env (alfworld 0.4.2 on TextWorld's PDDL engine).

Wraps ``textworld.envs.pddl.PddlEnv`` + ``AlfredDemangler`` (no torch, no ai2thor) in the
TextEnv contract (``agentrl/env/contract.py``), converting TextWorld's 3-tuple step to
Gymnasium's 5-tuple. Paper: ALFWorld, Shridhar et al. 2021, arXiv:2010.03768.

Observation: the engine's text exactly as returned (reset: welcome banner, room
description and ``"Your task is to: ..."``; step: the action feedback). ``anchor_obs`` is
that same string (ALGORITHMS.md §0.4; ``"Nothing happens."`` after invalid actions).
Reward 1.0 on the step that wins, else 0.0; ``terminated`` = won; ``truncated`` when
``max_turns`` (default 50) actions were taken without winning.

Milestones (BEACON, ALGORITHMS.md §15.2, decision D-15): the game's expert walkthrough (the
planner's, as ``info["walkthrough"]``) is the milestone list, ``info["n_milestones"] =
len(walkthrough)``; a step's action completes the next unmatched milestone iff
``difflib.SequenceMatcher(None, action, milestone).ratio() >= milestone_threshold`` (upstream
``migpo`` matches the parsed action as it is, invalid ones too; each action matches at most one).
Upstream reads the walkthroughs from its ``migpo/alfworld.json`` (3 553 trajectories, not vendored
here); this env uses its own planner walkthrough, which needs ``expert=True`` or a cached plan:
without one, ``n_milestones = 0`` and no step is a milestone (BEACON then gives segment 0, step
reward 0: GRPO's episode term alone).
"""

from __future__ import annotations

import os
from difflib import SequenceMatcher
from typing import Any

import gymnasium

from agentrl.env.contract import (
    INFO_ADMISSIBLE, INFO_ANCHOR, INFO_MILESTONE, INFO_N_MILESTONES, INFO_TASK, INFO_VALID, INFO_WALKTHROUGH,
    INFO_WON, require_module,
)
from agentrl.env.spaces import UnicodeText
from agentrl.env.tasks import TaskRef, check_split_disjoint
from agentrl_envs.alfworld import data as alf_data
from agentrl_envs.alfworld import expert
from agentrl_envs.textworld.engine_lock import ENGINE_LOCK

INFO_INSTRUCTION = "instruction"


class ALFWorldEnv(gymnasium.Env):
    """ALFWorld text env over the kept (and generated) games.

    Args:
        split: ``"train"`` (``valid_train`` 200 games + generated), ``"eval_seen"`` (140) or
            ``"eval_unseen"`` (134).
        data_dir: folder holding ``json_2.1.1`` (default ``$AGENTRL_ALFWORLD_DATA``, else
            ``../shared/data/alfworld``).
        generated_dir: extra train games written by ``agentrl_envs.alfworld.generate`` (default
            ``$AGENTRL_ALFWORLD_GENERATED``; ignored for eval splits).
        grammar: ``"native"`` (as stored; kept games say ``put X in/on Y``) or ``"0.4.2"``
            (re-skinned at load: ``move X to Y``, ``help``).
        max_turns: actions per episode before ``truncated`` (default 50).
        expert: when True, ``reset`` computes (once, cached on disk) the planner
            walkthrough; when False it is still returned if already cached.
        milestone_threshold: similarity an action needs to match the next walkthrough step
            (BEACON milestones, module docstring; the released ALFWorld script's 0.95).

    Raises:
        MissingExtraError: alfworld/textworld not installed (``pip install 'agentrl[alfworld]'``).
        DataMissingError: missing or empty data dir (PITFALLS P9).
        ValueError: unknown split or grammar, ``max_turns < 1``.

    ``reset(seed=..., options={"task_id": ...})`` plays that task (it must belong to the
    split); without a task id the task is drawn from the split with ``np_random`` (same
    seed → same task). Info keys: ``anchor_obs``, ``admissible_actions``, ``won``,
    ``task_id``, ``instruction`` (the task sentence), ``action_valid`` (step),
    ``walkthrough`` (reset, see ``expert``).
    """

    # commands are matched against the admissible list: the loop collapses whitespace first
    # splits and the expert kwargs: pre-flight and the walkthrough policy read them (contract)
    # data_name: `agentrl data prepare alfworld` installs the game files for every run (agentrl.env.data_home)
    metadata = {"render_modes": [], "agentrl.data_name": "alfworld", "agentrl.action_normalize": "whitespace",
                "agentrl.splits": tuple(alf_data.SPLITS), "agentrl.walkthrough_kwargs": {"expert": True},
                "agentrl.expert_kwargs": {}}

    @classmethod
    def check_data(cls, split: str = "train", data_dir: str | os.PathLike | None = None,
                   generated_dir: str | os.PathLike | None = None, **_: Any) -> None:
        """Pre-flight hook (``agentrl.env.preflight``): the games this env would load exist.
        Raises ``DataMissingError`` / ``ValueError`` as the constructor would, building nothing."""
        alf_data.check_data(split, data_dir, generated_dir)

    @classmethod
    def list_tasks(cls, split: str = "train", data_dir: str | os.PathLike | None = None,
                   generated_dir: str | os.PathLike | None = None, **_: Any) -> list[TaskRef]:
        """Task-list hook (``agentrl.env.tasks``): the games of ``split``, each digested by
        its ``game.tw-pddl`` bytes."""
        return alf_data.task_refs(split, data_dir, generated_dir if split == "train" else None)

    def __init__(self, split: str = "train", data_dir: str | os.PathLike | None = None,
                 generated_dir: str | os.PathLike | None = None, grammar: str = "native",
                 max_turns: int = 50, expert: bool = False, milestone_threshold: float = 0.95) -> None:
        textworld = require_module("textworld", "alfworld")
        pddl = require_module("textworld.envs.pddl", "alfworld")
        tw_env = require_module("alfworld.agents.environment.alfred_tw_env", "alfworld")
        if grammar not in alf_data.GRAMMARS:
            raise ValueError(f"unknown ALFWorld grammar {grammar!r}; choose one of {alf_data.GRAMMARS}")
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.split, self.grammar, self.max_turns, self.expert = split, grammar, int(max_turns), bool(expert)
        if not 0.0 <= milestone_threshold <= 1.0:
            raise ValueError(f"milestone_threshold must be in [0, 1], got {milestone_threshold}")
        self.milestone_threshold = float(milestone_threshold)
        self._milestones: list[str] = []
        self._matched = 0
        self.games = alf_data.list_games(split, data_dir, generated_dir if split == "train" else None)
        check_split_disjoint(type(self), split, {"data_dir": data_dir, "generated_dir": generated_dir},
                             tuple(alf_data.SPLITS))
        self._by_id = {g.task_id: g for g in self.games}
        infos = textworld.EnvInfos(won=True, admissible_commands=True)
        self._engine = tw_env.AlfredDemangler(pddl.PddlEnv(infos))
        self.observation_space = UnicodeText()
        self.action_space = UnicodeText()
        self._loaded: str | None = None
        self._game_data: dict[str, object] = {}
        self._admissible: list[str] = []
        self._turns = 0
        self._done = True
        self._task_id = ""
        self._instruction = ""

    @property
    def task_ids(self) -> list[str]:
        """Task ids of this split, sorted."""
        return [g.task_id for g in self.games]

    def _load(self, task_id: str) -> None:
        if task_id not in self._by_id:
            from agentrl.registry import unknown_name_error

            raise unknown_name_error(f"ALFWorld task id (split {self.split!r})", task_id, self._by_id)
        if self._loaded != task_id:
            with ENGINE_LOCK:  # TextWorld's engines are not thread-safe (agentrl_envs.textworld.engine_lock)
                self._game_data = alf_data.load_game(self._by_id[task_id].path, self.grammar)
                self._engine.load(self._game_data)
            self._loaded = task_id
            self._instruction = alf_data.goal_text(str(self._game_data["grammar"]))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode; returns ``(obs, info)``. Raises ``KeyError`` for a task id not
        in this split (with close matches)."""
        super().reset(seed=seed)
        task_id = (options or {}).get("task_id")
        if task_id is None:
            task_id = self.games[int(self.np_random.integers(len(self.games)))].task_id
        self._load(str(task_id))
        plan = expert.cached_walkthrough(self._game_data)
        need_plan = self.expert and plan is None
        # the planner runs on this engine, at most once per game (then the disk cache answers)
        self._engine.request_infos.extras = ["walkthrough"] if need_plan else []
        with ENGINE_LOCK:  # the PDDL engine's reset runs fast-downward's translator: module-global state
            state = self._engine.reset()
        if need_plan:
            plan = [str(c) for c in state["extra.walkthrough"]]
            expert.store_walkthrough(self._game_data, plan)
        self._task_id, self._turns, self._done = str(task_id), 0, False
        self._admissible = list(state["admissible_commands"])
        info = self._info(state)
        info[INFO_TASK] = self._task_id
        if plan is not None:
            info[INFO_WALKTHROUGH] = list(plan)
        self._milestones, self._matched = list(plan or ()), 0
        info[INFO_N_MILESTONES] = len(self._milestones)
        return str(state.feedback), info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Apply one text command. A command that is not admissible is not an error: the
        engine answers ``"Nothing happens."`` and ``info["action_valid"]`` is False.

        Raises:
            RuntimeError: ``step`` before ``reset`` or after the episode ended.
            TypeError: ``action`` is not a str.
        """
        if self._done:
            raise RuntimeError("ALFWorldEnv.step called before reset() or after the episode ended; call reset()")
        if not isinstance(action, str):
            raise TypeError(f"action must be a str, got {type(action).__name__}")
        valid = action.strip() in self._admissible
        with ENGINE_LOCK:
            state, _, _ = self._engine.step(action)
        self._turns += 1
        self._admissible = list(state["admissible_commands"])
        won = bool(state["won"])
        terminated = won
        truncated = not terminated and self._turns >= self.max_turns
        self._done = terminated or truncated
        info = self._info(state)
        info[INFO_VALID] = valid
        info[INFO_MILESTONE] = self._match_milestone(action)
        info[INFO_N_MILESTONES] = len(self._milestones)
        return str(state.feedback), float(won), terminated, truncated, info

    def expert_plan(self) -> list[str]:
        """The Fast Downward planner's commands from the *current* state (≈0.1–4 s a call, never
        used in rollouts), in the played wording; for the expert check (``agentrl.env.expert``).
        ``[]`` once the episode is over or when the planner finds no plan."""
        if self._done:
            return []
        inner = self._engine
        while not hasattr(inner, "_pddl_state") and hasattr(inner, "_wrapped"):
            inner = inner._wrapped
        with ENGINE_LOCK:
            return [str(c) for c in (inner._pddl_state.replan(inner._entity_infos) or [])]

    def _match_milestone(self, action: str) -> bool:
        """True when ``action`` completes the next walkthrough milestone (module docstring)."""
        if self._matched >= len(self._milestones):
            return False
        if SequenceMatcher(None, action, self._milestones[self._matched]).ratio() < self.milestone_threshold:
            return False
        self._matched += 1
        return True

    def _info(self, state) -> dict[str, Any]:
        return {
            INFO_ANCHOR: str(state.feedback),
            INFO_ADMISSIBLE: list(self._admissible),
            INFO_WON: bool(state["won"]),
            INFO_TASK: self._task_id,
            INFO_INSTRUCTION: self._instruction,
        }

    def close(self) -> None:
        """Release the engine (idempotent)."""
        if self._engine is not None:
            self._engine.close()
            self._engine = None

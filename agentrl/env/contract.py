"""The TextEnv contract: what every agentrl text env promises on top of ``gymnasium.Env``.

A text env is a ``gymnasium.Env`` with ``observation_space`` and ``action_space`` equal
to ``UnicodeText()`` and:

- ``reset(*, seed=None, options=None) -> (obs: str, info: dict)``. The same seed gives the
  same task and the same observations. ``options["task_id"]`` may select a task.
- ``step(action: str) -> (obs: str, reward: float, terminated: bool, truncated: bool,
  info: dict)``. ``terminated``: the task ended (won or lost); ``truncated``: the turn
  limit cut the episode (never both True). An unparsable or impossible action is *not*
  an exception: the env answers with feedback and ``info["action_valid"] = False``.
- ``info`` keys (constants below): ``anchor_obs`` (raw state text for "same state"
  tests, ALGORITHMS.md §0.4; no history, no template), ``admissible_actions`` (list of
  str, when the env has them), ``won`` (bool), ``action_valid`` (bool, step only),
  ``task_id`` (str, reset), ``walkthrough`` (list of str, reset, when an expert plan is
  cheap to get; never computed per step), and, for milestone-guided credit (BEACON,
  ALGORITHMS.md §15.2, decision D-15), ``milestone`` (bool, step: True on the step that
  completed the episode's *next* milestone, i.e. verifiable sub-goal, each milestone once and
  in order) and ``n_milestones`` (int, reset and every step, when the env knows how many
  milestones the task has). The agent loop copies both into ``Turn.info``.
- ``instructions`` (str, reset, optional): the env's own instructions to the agent (what
  the game is, how an action is written), rendered into the system prompt where the
  template ``policy.system_prompt`` says ``{env_instructions}`` (``agentrl.rollout.prompt``);
  an env without them gets a generic text-game sentence (``DEFAULT_INSTRUCTIONS``).
- ``close()`` is idempotent.
- Rewards are real numbers, finite, and inside ``metadata["agentrl.reward_range"]`` when the env
  declares one; observations are ``str`` of at most ``env.max_observation_chars`` characters.
  The env pools check every answer (``agentrl.env.guards``): one that breaks this makes the
  episode ``env_error`` with its cause (``reward_not_numeric``, ``reward_not_finite``,
  ``reward_out_of_range``, ``observation_not_text``, ``observation_too_large``) — never a crash
  of the run, never a score.

- Action normalisation: the agent loop hands ``step`` the parsed action *exactly* as the
  model wrote it (code, JSON tool calls: every newline and indent matters). A text game
  that matches commands may ask the loop to normalise first by declaring, in the class's
  ``metadata``, ``"agentrl.action_normalize": "whitespace"`` (strip, collapse whitespace
  runs to one space); ``"exact"`` is the default. ``check_env`` refuses other values and a
  listed admissible action that the declared normalisation would change (unreachable).

- Pre-flight (``agentrl.env.preflight``, optional): ``metadata["agentrl.splits"]`` lists the
  values the constructor's ``split`` accepts, and a classmethod ``check_data(**kwargs)``
  looks cheaply at the data the constructor would read (raising ``DataMissingError``), so
  a config or ``agentrl rollout`` is refused before any worker or model starts.
- Walkthroughs on request (optional): ``metadata["agentrl.walkthrough_kwargs"]`` holds the
  constructor kwargs under which ``reset`` gives ``info["walkthrough"]`` for every task
  (e.g. ALFWorld's ``{"expert": True}``, which plans once per game); the walkthrough
  policy builds the env with them.

- Expert from the current state (optional, the expert-Q credit check ``agentrl.env.expert``): a
  method ``expert_plan() -> list[str]`` (the expert's actions from the current state) and
  ``metadata["agentrl.expert_kwargs"]`` (constructor kwargs it needs).

- Group members at reset (optional): an env whose episodes of one group must differ although
  they share the env seed (e.g. the junction maze's ``paraphrase=1``: no room worded alike by
  two members) declares ``metadata["agentrl.reset_member"] = True`` (``META_RESET_MEMBER``).
  Every agentrl reset path then passes ``options["agentrl.member"] = [j, G]``
  (``OPTION_MEMBER``): ``j`` the episode's index inside its group (``0 <= j < G``), ``G`` the
  group size (``collect``: episode ``g*G + j``; ``run_scripted``: the request's group;
  ``sample_trees``: tree ``m`` of ``M``, its branches replaying with the same options). A reset
  without the key is member 0 of 1. The same seed and options must give the same episode.
  Envs that do not declare it never get the key.

Envs register with ``gymnasium.register(id="agentrl/Name-vN", entry_point="pkg.mod:Cls")``
in ``envs/__init__.py``; bump ``-vN`` when reward, observation format or prompt template
changes.
"""

from __future__ import annotations

import re
from typing import Mapping

INFO_ANCHOR = "anchor_obs"
INFO_ADMISSIBLE = "admissible_actions"
INFO_WON = "won"
INFO_VALID = "action_valid"
INFO_TASK = "task_id"
INFO_WALKTHROUGH = "walkthrough"
#: reset info (optional): the env's instructions to the agent, for ``{env_instructions}``.
INFO_INSTRUCTIONS = "instructions"
#: step info: True on the step that completed the episode's next milestone (BEACON, §15.2).
INFO_MILESTONE = "milestone"
#: reset and step info: the task's number of milestones, when the env knows it (BEACON, §15.2).
INFO_N_MILESTONES = "n_milestones"
#: step info: str set when the env's infrastructure failed (e.g. a sandbox died during
#: scoring, PITFALLS P8); the episode's status becomes env_error, its reward is not a score.
INFO_ENV_ERROR = "env_error"  # step info: the env's infrastructure failed (str reason); the episode is env_error, not scored

#: class ``metadata`` key: how the agent loop normalises a parsed action before ``step``.
META_ACTION_NORMALIZE = "agentrl.action_normalize"
ACTION_EXACT = "exact"  # the default: the action reaches step as the model wrote it
ACTION_WHITESPACE = "whitespace"  # stripped, whitespace runs collapsed to one space (text-game commands)
ACTION_NORMALIZE_MODES = (ACTION_EXACT, ACTION_WHITESPACE)

#: class ``metadata`` key: the values of the constructor's ``split`` (pre-flight checks them).
META_SPLITS = "agentrl.splits"
#: class ``metadata`` key: constructor kwargs under which reset gives ``info["walkthrough"]``.
META_WALKTHROUGH_KWARGS = "agentrl.walkthrough_kwargs"
#: class ``metadata`` key: True for an env that plays an env served by another process
#: (``agentrl/Remote-v0``): it cannot be built without a server URL, so checks that build every
#: registered id with its declared kwargs (``agentrl.env.registry.local_ids``) leave it out.
META_REMOTE = "agentrl.remote"
#: class ``metadata`` key: True for an env that wants each episode's place in its group at reset
#: (``options[OPTION_MEMBER]``; module docstring, "Group members at reset").
META_RESET_MEMBER = "agentrl.reset_member"
#: reset ``options`` key: ``[j, G]``, the episode's index ``j`` in its group of ``G`` (only for envs
#: declaring ``META_RESET_MEMBER``).
OPTION_MEMBER = "agentrl.member"
#: class ``metadata`` key: ``(low, high)``, the closed range every step reward lies in. Optional
#: (Gymnasium 1.x dropped ``Env.reward_range``); where declared, the env pools make a step whose
#: reward falls outside it an env error (``agentrl.env.guards``).
META_REWARD_RANGE = "agentrl.reward_range"
#: optional classmethod of an env class: ``check_data(**constructor_kwargs) -> None``.
DATA_CHECK_HOOK = "check_data"

RESET_INFO_KEYS = (INFO_ANCHOR, INFO_WON, INFO_TASK)
STEP_INFO_KEYS = (INFO_ANCHOR, INFO_WON, INFO_VALID)



def milestone_info(info: Mapping[str, object]) -> dict[str, bool | int]:
    """The ``Turn.info`` entries of BEACON's milestones (§15.2) from an env step's ``info``:
    ``{"milestone": bool}`` and ``{"n_milestones": int}`` for the keys the env published,
    ``{}`` for an env that publishes none (its turns then count as milestone-free)."""
    out: dict[str, bool | int] = {}
    if INFO_MILESTONE in info:
        out[INFO_MILESTONE] = bool(info[INFO_MILESTONE])
    if info.get(INFO_N_MILESTONES) is not None:
        out[INFO_N_MILESTONES] = int(info[INFO_N_MILESTONES])  # type: ignore[call-overload]
    return out


class MissingExtraError(ImportError):
    """An optional dependency of an env (or engine) is not installed.

    The message names the missing module and the install command, e.g.
    ``pip install 'agentrl[textworld]'``.
    """

    def __init__(self, module: str, extra: str) -> None:
        super().__init__(
            f"module {module!r} is not installed; it is needed here. Install it with: "
            f"pip install 'agentrl[{extra}]' (or run scripts/setup.sh, which installs every extra)"
        )
        self.module = module
        self.extra = extra


def require_module(module: str, extra: str):
    """Import and return ``module``, raising ``MissingExtraError`` naming ``extra`` if absent."""
    import importlib

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.split(".")[0] == exc.name.split(".")[0]:
            raise MissingExtraError(module, extra) from exc
        raise


class DataMissingError(FileNotFoundError):
    """A data-backed env found no data (PITFALLS P9). The message names the directory it
    looked in and how to provide the data."""


def normalize_action(action: str, mode: str = ACTION_EXACT) -> str:
    """``action`` as an env with normalisation ``mode`` receives it from the agent loop:
    unchanged (``"exact"``) or stripped with whitespace runs collapsed (``"whitespace"``).

    Raises:
        ValueError: an unknown mode.
    """
    if mode == ACTION_EXACT:
        return action
    if mode == ACTION_WHITESPACE:
        return re.sub(r"\s+", " ", action).strip()
    raise ValueError(f"unknown action normalisation {mode!r}; use one of {list(ACTION_NORMALIZE_MODES)}")

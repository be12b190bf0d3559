"""``check_env``: the TextEnv contract checker, run over every registered id in the tests.

Checks (each failure raises ``EnvCheckError`` naming the id and the broken rule):

1. spaces: ``observation_space`` and ``action_space`` are ``UnicodeText``;
2. types: ``reset`` → ``(str, dict)`` with ``anchor_obs`` (str), ``won`` (bool), ``task_id``
   (str); ``step`` → ``(str, float, bool, bool, dict)`` with ``anchor_obs``, ``won``,
   ``action_valid`` (bool); ``admissible_actions`` / ``walkthrough`` are lists of str and
   ``instructions`` (reset) is a str when present; rewards are finite;
3. terminated/truncated rules: never both True; ``won`` implies ``terminated``;
4. walkthrough: when reset info has one, playing it ends the episode with ``won=True``;
5. seeded determinism: a second env instance reset with the same seed and fed the same
   actions returns identical observations, rewards, flags and infos' contract keys;
6. garbage actions (empty, control characters, newlines, non-ASCII, 10k characters) never
   raise; when the env lists admissible actions, a garbage action is ``action_valid=False``;
7. ``close()`` twice does not raise;
8. action normalisation: ``metadata["agentrl.action_normalize"]``, when declared, is a known
   mode, and no listed admissible action is changed by it (the agent loop could never
   send it).

Cheap construction for checking: an env class may declare constructor kwargs used only by
the checker in its ``metadata["agentrl.check_kwargs"]`` (e.g. ``{"n_tasks": 2}`` so a
game-generating env builds 2 games, or a small split). ``check_kwargs(env_id)`` reads them;
kwargs given to ``check_env`` override them. ``agentrl envs check ID`` runs it from the shell.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import gymnasium
import numpy as np

from agentrl.env.contract import (ACTION_EXACT, INFO_ADMISSIBLE, INFO_ANCHOR, INFO_INSTRUCTIONS, INFO_TASK, INFO_VALID,
                                  INFO_WALKTHROUGH, INFO_WON, META_ACTION_NORMALIZE, RESET_INFO_KEYS,
                                  STEP_INFO_KEYS, DataMissingError, MissingExtraError, normalize_action)
from agentrl.env.registry import action_normalization, env_metadata, make
from agentrl.env.spaces import UnicodeText

CHECK_KWARGS_KEY = "agentrl.check_kwargs"
GARBAGE_ACTIONS = ("", "   ", "\x00\x1b[31m\x07", "look\ninventory", "ünïcödé ☃ 中文 🙂",
                   "x" * 10_000, "'; DROP TABLE turns; --", "{\"action\": null}")
#: the rules ``check_env`` checks, in the module doc's order (``agentrl envs check`` prints them).
RULES = ("spaces are UnicodeText", "reset/step types and info keys", "terminated/truncated/won flags",
         "the walkthrough wins", "seeded determinism", "garbage actions never raise", "close() twice",
         "action normalisation")


class EnvCheckError(AssertionError):
    """A text env broke the TextEnv contract; the message names the env and the rule."""


class EnvBuildError(ValueError):
    """The env could not be built (``gymnasium.make`` or the env's constructor raised): a set-up
    error (missing constructor keywords, a module that fails on import), not a broken rule."""


def _build(env_id: str, kwargs: dict) -> gymnasium.Env:
    """``make(env_id, **kwargs)``; EnvBuildError naming the env and the cause for anything but a
    missing extra or missing data (those keep their own messages)."""
    try:
        return make(env_id, **kwargs)
    except (MissingExtraError, DataMissingError, KeyError):
        raise
    except Exception as exc:  # noqa: BLE001 - a user's constructor may raise anything
        cause = exc.__cause__ or exc
        raise EnvBuildError(f"{env_id} could not be built with {kwargs or 'no keywords'}: {type(cause).__name__}: "
                            f"{cause}; if it needs constructor keywords, pass them (agentrl envs check --env-kwarg "
                            "KEY=VALUE)") from exc


@dataclass(frozen=True)
class CheckReport:
    """What ``check_env`` exercised: ``episodes`` resets, ``steps`` steps in total, whether
    a walkthrough was found and won (None when the env gives none)."""

    env_id: str
    episodes: int
    steps: int
    walkthrough_won: bool | None


def check_kwargs(env_id: str) -> dict:
    """The env class's declared check kwargs (``metadata["agentrl.check_kwargs"]``), or {}."""
    return dict(env_metadata(env_id).get(CHECK_KWARGS_KEY, {}))


def check_env(env_id: str, *, seed: int = 0, max_steps: int = 30, **env_kwargs: Any) -> CheckReport:
    """Check the env registered as ``env_id`` against the TextEnv contract (module doc).

    Args:
        env_id: registered id; the env is built with ``check_kwargs(env_id)`` updated by
            ``env_kwargs``.
        seed: reset seed of the checked episodes and of the random action choice.
        max_steps: cap on steps of the random-action episode.
    Returns: a CheckReport.
    Raises: EnvCheckError on the first broken rule (an env method that raises included);
        EnvBuildError when the env cannot be built (constructor keywords, a failing import);
        KeyError for an unknown id; MissingExtraError when the env's optional dependency is
        absent; DataMissingError when its data is.
    """
    kwargs = {**check_kwargs(env_id), **env_kwargs}
    try:
        normalize = action_normalization(env_id)
    except ValueError as exc:
        raise EnvCheckError(str(exc)) from None
    factory: Callable[[], gymnasium.Env] = lambda: _build(env_id, kwargs)  # noqa: E731
    env = factory()
    c = _Checker(env_id, normalize)
    try:
        return _run_checks(c, env, env_id, seed, max_steps, factory)
    except (EnvCheckError, EnvBuildError):
        raise
    except Exception as exc:  # noqa: BLE001 - an env method raising is a contract failure, named as such
        raise EnvCheckError(f"{env_id}: the env raised {type(exc).__name__}: {exc} (reset/step/close must not raise "
                            "on valid use; an invalid action is answered with feedback)") from exc


def _run_checks(c: "_Checker", env: gymnasium.Env, env_id: str, seed: int, max_steps: int,
                factory: Callable[[], gymnasium.Env]) -> CheckReport:
    """The rule checks of ``check_env`` on a built ``env`` (closed at the end, twice)."""
    try:
        c.check_spaces(env)
        walk_won = c.play_walkthrough(env, seed)
        actions, trace = c.play_random(env, seed, max_steps)
        twin = factory()
        try:
            c.require(c.replay(twin, seed, actions) == trace,
                      f"not deterministic: same seed {seed} and same actions gave different results")
        finally:
            twin.close()
        c.require(c.replay(env, seed, actions) == trace, "a second reset with the same seed on the "
                  "same instance gave a different episode (state leaks across resets)")
        c.play_garbage(env, seed)
    finally:
        env.close()
    try:
        env.close()
    except Exception as exc:
        raise EnvCheckError(f"{env_id}: close() is not idempotent: second call raised {exc!r}") from exc
    return CheckReport(env_id, c.episodes, c.steps, walk_won)


class _Checker:
    """Rule checks on one env's answers; counts episodes and steps."""

    def __init__(self, env_id: str, normalize: str = ACTION_EXACT) -> None:
        self.env_id, self.episodes, self.steps = env_id, 0, 0
        self.normalize = normalize

    def require(self, ok: bool, rule: str) -> None:
        if not ok:
            raise EnvCheckError(f"{self.env_id}: {rule}")

    def check_spaces(self, env: gymnasium.Env) -> None:
        for name in ("observation_space", "action_space"):
            space = getattr(env, name)
            self.require(isinstance(space, UnicodeText), f"{name} must be UnicodeText, got {space!r}")

    def reset(self, env: gymnasium.Env, seed: int) -> tuple[str, dict]:
        out = env.reset(seed=seed)
        self.require(isinstance(out, tuple) and len(out) == 2, f"reset must return (obs, info), got {type(out)}")
        obs, info = out
        self._check_common(obs, info, RESET_INFO_KEYS, "reset")
        self.require(isinstance(info[INFO_TASK], str), f"reset info[{INFO_TASK!r}] must be str")
        walk = info.get(INFO_WALKTHROUGH)
        self.require(walk is None or _is_str_list(walk), "info['walkthrough'] must be a list of str")
        instructions = info.get(INFO_INSTRUCTIONS)
        self.require(instructions is None or isinstance(instructions, str),
                     f"reset info[{INFO_INSTRUCTIONS!r}] must be str (the env's instructions for the system prompt), "
                     f"got {type(instructions).__name__}")
        self.episodes += 1
        return obs, info

    def step(self, env: gymnasium.Env, action: str) -> tuple:
        try:
            out = env.step(action)
        except Exception as exc:
            raise EnvCheckError(f"{self.env_id}: step({action[:40]!r}) raised {exc!r}; a text env "
                                "answers any action text with feedback (action_valid=False when "
                                "it is not a valid action), it never raises") from exc
        self.require(isinstance(out, tuple) and len(out) == 5,
                     "step must return (obs, reward, terminated, truncated, info)")
        obs, reward, term, trunc, info = out
        self._check_common(obs, info, STEP_INFO_KEYS, f"step({action[:40]!r})")
        self.require(isinstance(reward, (int, float, np.floating, np.integer)) and not isinstance(reward, bool)
                     and math.isfinite(float(reward)), f"reward must be a finite float, got {reward!r}")
        for flag, name in ((term, "terminated"), (trunc, "truncated"), (info[INFO_VALID], "action_valid")):
            self.require(isinstance(flag, (bool, np.bool_)), f"{name} must be bool, got {type(flag).__name__}")
        self.require(not (term and trunc), "terminated and truncated are both True")
        self.require(not info[INFO_WON] or term, "won=True requires terminated=True")
        self.steps += 1
        return obs, float(reward), bool(term), bool(trunc), info

    def _check_common(self, obs: Any, info: Any, keys: tuple[str, ...], where: str) -> None:
        self.require(isinstance(obs, str), f"{where}: obs must be str, got {type(obs).__name__}")
        self.require(isinstance(info, dict), f"{where}: info must be a dict")
        missing = [k for k in keys if k not in info]
        self.require(not missing, f"{where}: info lacks required keys {missing}")
        self.require(isinstance(info[INFO_ANCHOR], str), f"{where}: info['anchor_obs'] must be str")
        self.require(isinstance(info[INFO_WON], (bool, np.bool_)), f"{where}: info['won'] must be bool")
        adm = info.get(INFO_ADMISSIBLE)
        self.require(adm is None or _is_str_list(adm), f"{where}: info['admissible_actions'] must be list[str]")
        changed = [a for a in adm or () if normalize_action(a, self.normalize) != a]
        self.require(not changed, f"{where}: admissible actions {changed[:3]} change under the env's "
                     f"metadata[{META_ACTION_NORMALIZE!r}] = {self.normalize!r}, so the agent loop could never "
                     "send them; list them normalised or declare 'exact'")

    def play_walkthrough(self, env: gymnasium.Env, seed: int) -> bool | None:
        _, info = self.reset(env, seed)
        walk = info.get(INFO_WALKTHROUGH)
        if not walk:
            return None
        for i, action in enumerate(walk):
            _, _, term, trunc, info = self.step(env, action)
            if term or trunc:
                break
        self.require(bool(info[INFO_WON]) and term,
                     f"following the reset walkthrough {walk} did not win (stopped at action {i})")
        return True

    def play_random(self, env: gymnasium.Env, seed: int, max_steps: int) -> tuple[list[str], list]:
        """One episode of seeded random actions (admissible ones 80 % of the time when
        listed, else a garbage or sampled action). Returns (actions, trace)."""
        rng = np.random.default_rng(seed)
        obs, info = self.reset(env, seed)
        actions, trace = [], [_key(obs, 0.0, False, False, info)]
        for _ in range(max_steps):
            adm = info.get(INFO_ADMISSIBLE) or []
            if adm and rng.random() < 0.8:
                action = adm[int(rng.integers(len(adm)))]
            else:
                action = GARBAGE_ACTIONS[int(rng.integers(len(GARBAGE_ACTIONS)))]
            obs, reward, term, trunc, info = self.step(env, action)
            actions.append(action)
            trace.append(_key(obs, reward, term, trunc, info))
            if term or trunc:
                break
        return actions, trace

    def replay(self, env: gymnasium.Env, seed: int, actions: list[str]) -> list:
        obs, info = self.reset(env, seed)
        trace = [_key(obs, 0.0, False, False, info)]
        for action in actions:
            obs, reward, term, trunc, info = self.step(env, action)
            trace.append(_key(obs, reward, term, trunc, info))
        return trace

    def play_garbage(self, env: gymnasium.Env, seed: int) -> None:
        obs, info = self.reset(env, seed)
        for action in GARBAGE_ACTIONS:
            adm = info.get(INFO_ADMISSIBLE)
            obs, _, term, trunc, info = self.step(env, action)
            if adm and action not in adm:
                self.require(not info[INFO_VALID], f"garbage action {action[:40]!r} is not admissible "
                             "but action_valid=True")
            if term or trunc:
                obs, info = self.reset(env, seed + 1)


def _is_str_list(x: Any) -> bool:
    return isinstance(x, (list, tuple)) and all(isinstance(a, str) for a in x)


def _key(obs: str, reward: float, term: bool, trunc: bool, info: dict) -> tuple:
    """The comparable part of one answer (contract keys only; extra info may hold timings)."""
    return (obs, reward, term, trunc, info.get(INFO_ANCHOR), info.get(INFO_WON), info.get(INFO_VALID),
            tuple(info.get(INFO_ADMISSIBLE) or ()), info.get(INFO_TASK))

"""Env ids: ``make`` and ``list_ids`` over gymnasium's registry with actionable errors.

Our envs register in ``envs/__init__.py`` (imported through gymnasium's ``gymnasium.envs``
entry-point group, like any third-party plugin). ``make`` adds what gymnasium lacks: an
unknown id lists the closest registered ids (PITFALLS P10).
"""

from __future__ import annotations

import importlib
import importlib.metadata

import gymnasium
from gymnasium.envs.registration import load_env_creator

from agentrl.env.contract import ACTION_EXACT, ACTION_NORMALIZE_MODES, META_ACTION_NORMALIZE
from agentrl.registry import unknown_name_error

_PLUGINS_LOADED = False


def load_plugins() -> None:
    """Import every module named in the ``gymnasium.envs`` entry-point group once (ours is
    ``envs``), so their ``gymnasium.register`` calls run. Errors of a third-party plugin are
    re-raised with its name."""
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED:
        return
    _PLUGINS_LOADED = True
    for ep in importlib.metadata.entry_points(group="gymnasium.envs"):
        try:
            fn = ep.load()
            if callable(fn):
                fn()
        except Exception as exc:  # pragma: no cover - third-party failure path
            raise RuntimeError(f"env plugin {ep.name!r} ({ep.value}) failed to load: {exc}") from exc
    try:
        importlib.import_module("envs")
    except ModuleNotFoundError:  # running without our envs package installed
        pass


def list_ids(prefix: str = "agentrl/") -> list[str]:
    """Registered env ids starting with ``prefix`` (all ids with ``prefix=""``), sorted."""
    load_plugins()
    return sorted(i for i in gymnasium.registry if i.startswith(prefix))


def validate_id(env_id: str) -> str:
    """Return ``env_id`` if registered, else raise ``KeyError`` naming the closest ids."""
    load_plugins()
    if env_id not in gymnasium.registry:
        raise unknown_name_error("env id", env_id, text_env_ids())
    return env_id


def text_env_ids() -> list[str]:
    """Registered ids outside gymnasium's own built-in envs (ours and third-party plugins)."""
    load_plugins()
    return sorted(i for i, spec in gymnasium.registry.items()
                  if "/" in i and not str(spec.entry_point).startswith("gymnasium."))


def env_metadata(env_id: str) -> dict:
    """The ``metadata`` the env class of ``env_id`` declares (a copy; {} for a factory
    function without one), read from its entry point without building the env."""
    spec = gymnasium.spec(validate_id(env_id))
    creator = spec.entry_point if callable(spec.entry_point) else load_env_creator(spec.entry_point)
    return dict(getattr(creator, "metadata", None) or {})


def action_normalization(env_id: str) -> str:
    """How the agent loop normalises a parsed action before it reaches this env's ``step``:
    the class's ``metadata["agentrl.action_normalize"]``, default ``"exact"`` (unchanged).

    Raises:
        ValueError: the env declares an unknown mode.
    """
    mode = env_metadata(env_id).get(META_ACTION_NORMALIZE, ACTION_EXACT)
    if mode not in ACTION_NORMALIZE_MODES:
        raise ValueError(f"{env_id}: metadata[{META_ACTION_NORMALIZE!r}] = {mode!r} is not one of "
                         f"{list(ACTION_NORMALIZE_MODES)}")
    return mode


def make(env_id: str, **kwargs) -> gymnasium.Env:
    """``gymnasium.make`` for a validated id; ``kwargs`` go to the env constructor.

    The env is returned without gymnasium's default checker wrappers' type assumptions
    (``disable_env_checker=True``; ``agentrl.env.check.check_env`` is our checker).
    Raises:
        KeyError: unknown id (with suggestions).
        MissingExtraError: the env's optional dependency is not installed.
    """
    validate_id(env_id)
    return gymnasium.make(env_id, disable_env_checker=True, **kwargs)

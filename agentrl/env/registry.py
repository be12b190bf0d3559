"""Env ids: ``make`` and ``list_ids`` over gymnasium's registry with actionable errors.

Our envs register in ``agentrl_envs`` (the ``envs/`` folder, ``envs/__init__.py``) when
``agentrl`` is imported (``agentrl._gym_ids``); third-party envs register from the modules named
in the ``gymnasium.envs`` entry-point group, which ``load_plugins`` imports (Gymnasium 1.x no
longer does). ``make`` adds what gymnasium lacks: an unknown id lists the closest registered ids
(PITFALLS P10). ``text_env_ids`` is what ``agentrl envs list`` shows: every id whose entry point
lies outside Gymnasium itself (ours and third-party, in any namespace or none).
"""

from __future__ import annotations

import importlib.metadata

import gymnasium
from gymnasium.envs.registration import EnvSpec, load_env_creator

from agentrl._gym_ids import register_ids
from agentrl.env.contract import ACTION_EXACT, ACTION_NORMALIZE_MODES, META_ACTION_NORMALIZE, META_REMOTE
from agentrl.registry import unknown_name_error

_PLUGINS_LOADED = False


def load_plugins() -> None:
    """Import every module named in the ``gymnasium.envs`` entry-point group once (ours is
    ``agentrl_envs``), so their ``gymnasium.register`` calls run. Errors of a third-party plugin
    are re-raised with its name."""
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
    register_ids()  # ours even where the distribution's metadata is missing


def list_ids(prefix: str = "agentrl/") -> list[str]:
    """Registered env ids starting with ``prefix`` (all ids with ``prefix=""``), sorted."""
    load_plugins()
    return sorted(i for i in gymnasium.registry if i.startswith(prefix))


def local_ids(prefix: str = "agentrl/") -> list[str]:
    """``list_ids(prefix)`` without the ids whose class declares ``metadata["agentrl.remote"]``
    (envs served by another process, built only with a server URL)."""
    return [i for i in list_ids(prefix) if not env_metadata(i).get(META_REMOTE)]


def validate_id(env_id: str) -> str:
    """Return ``env_id`` if registered, else raise ``KeyError`` naming the closest ids."""
    load_plugins()
    if env_id not in gymnasium.registry:
        raise unknown_name_error("env id", env_id, text_env_ids())
    return env_id


def entry_point_module(spec: EnvSpec) -> str:
    """The module an id's entry point names (``"agentrl_envs.toy.env"``); for a callable
    entry point, its ``__module__``."""
    ep = spec.entry_point
    if isinstance(ep, str):
        return ep.split(":", 1)[0]
    return str(getattr(ep, "__module__", "") or "")


def is_gymnasium_builtin(spec: EnvSpec) -> bool:
    """True for Gymnasium's own ids (CartPole, the shimmy placeholders...): entry point in ``gymnasium.*``."""
    mod = entry_point_module(spec)
    return mod == "gymnasium" or mod.startswith("gymnasium.")


def text_env_ids() -> list[str]:
    """Registered ids whose entry point lies outside Gymnasium itself: ours and every
    third-party env, whatever its namespace (``agentrl envs list`` shows these)."""
    load_plugins()
    return sorted(i for i, spec in gymnasium.registry.items() if not is_gymnasium_builtin(spec))


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

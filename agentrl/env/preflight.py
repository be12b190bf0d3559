"""Pre-flight checks of the keyword arguments an env will be built with, before any env is.

An env that fails in its constructor fails inside an env worker process, after the model
may have loaded, as a traceback of that worker (issue 20 item 7). These checks run where the
kwargs are known (config validation, ``agentrl rollout``) and build nothing:

- ``check_env_keywords``: the kwargs bind to the env class's constructor (a misspelt keyword
  names the closest one);
- ``check_env_split``: ``split`` is one the class declares in ``metadata["agentrl.splits"]``
  (``META_SPLITS``; an env that declares none is not checked);
- ``check_env_data``: the class's optional hook ``check_data(**kwargs)`` (``DATA_CHECK_HOOK``),
  a cheap look at the data the constructor would read, raising ``DataMissingError``.

Each takes the caller's kwargs; the registration's own kwargs (``gymnasium.register(...,
kwargs=...)``) are merged under them, as ``gymnasium.make`` does.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping

import gymnasium
from gymnasium.envs.registration import load_env_creator

from agentrl.env.contract import DATA_CHECK_HOOK, META_SPLITS
from agentrl.env.registry import validate_id
from agentrl.registry import closest

__all__ = ["check_env_kwargs", "check_env_keywords", "check_env_split", "check_env_data", "env_creator"]


def env_creator(env_id: str):
    """The class (or factory) registered as ``env_id``, imported without building an env.

    Raises:
        KeyError: unknown id (with the closest ids).
    """
    spec = gymnasium.spec(validate_id(env_id))
    return spec.entry_point if callable(spec.entry_point) else load_env_creator(spec.entry_point)


def _merged(env_id: str, kwargs: Mapping | None) -> dict:
    return {**dict(gymnasium.spec(validate_id(env_id)).kwargs or {}), **dict(kwargs or {})}


def check_env_keywords(env_id: str, kwargs: Mapping | None = None) -> None:
    """Raise ``ValueError`` when a keyword of ``kwargs`` is not a parameter of the env's
    constructor (the message names the closest parameter and lists them all). An env whose
    constructor takes ``**kwargs`` or has no inspectable signature is not checked."""
    creator = env_creator(env_id)
    try:
        params = inspect.signature(creator).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    names = [n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    for key in _merged(env_id, kwargs):
        if key not in names:
            guess = closest(str(key), names, n=1)
            did = f"; did you mean {guess[0]!r}?" if guess else "."
            raise ValueError(f"env {env_id} takes no keyword {key!r}{did} Its keywords: {', '.join(names) or '(none)'}")


def check_env_split(env_id: str, split: str) -> None:
    """Raise ``ValueError`` when the env declares its splits (``metadata["agentrl.splits"]``)
    and ``split`` is not one of them (names the closest and lists them)."""
    splits = tuple((getattr(env_creator(env_id), "metadata", None) or {}).get(META_SPLITS, ()))
    if splits and split not in splits:
        guess = closest(str(split), list(splits), n=1)
        did = f"; did you mean {guess[0]!r}?" if guess else "."
        raise ValueError(f"env {env_id} has no split {split!r}{did} Its splits: {', '.join(splits)}")


def check_env_data(env_id: str, kwargs: Mapping | None = None) -> None:
    """Run the env class's ``check_data(**kwargs)`` hook when it has one (no-op otherwise).

    Raises:
        DataMissingError: the data the env would read is missing (the message names the
            folder and the fix); ValueError: what the hook finds invalid.
    """
    hook = getattr(env_creator(env_id), DATA_CHECK_HOOK, None)
    if callable(hook):
        hook(**_merged(env_id, kwargs))


def check_env_kwargs(env_id: str, kwargs: Mapping | None = None) -> None:
    """All three checks for the kwargs an env will be built with (``split`` taken from them).

    Raises:
        KeyError: unknown id. ValueError: unknown keyword or split. DataMissingError: no data.
    """
    check_env_keywords(env_id, kwargs)
    merged = _merged(env_id, kwargs)
    if "split" in merged:
        check_env_split(env_id, merged["split"])
    check_env_data(env_id, kwargs)

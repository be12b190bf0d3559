"""The config checks against the registries above L0: the env id and its kwargs, the loss, the
estimator's kwargs (its defaults filled into ``algorithm.kwargs``) and the estimator's rules.

``agentrl.config`` (L0) builds a ``Config`` and fills the defaults that need no registry; it may
not import the env registry (L1), the losses or the estimator registry (L3). The checks that do
live here, in the layer that may import them, and every path that trains, evaluates or prints a
config runs them: ``agentrl train`` (``--print-config`` too), ``agentrl eval``, ``agentrl sft``
(``agentrl.sft.split_sft_config``), ``agentrl.train.train`` at the start of a run (so a
``Config`` from ``agentrl.config.load_config`` gets them through the Python API) and
``agentrl.train.export``. ``check_config`` is idempotent.

Errors are ``ConfigError`` naming the dotted key and the fix (the same texts as when these
checks lived in ``agentrl.config``). Layer: ``agentrl.train`` (L4); imports L0, ``agentrl.env``
and ``agentrl.credit``, and the losses (``agentrl.update.losses``, torch) only when checking.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentrl.config import AlgorithmConfig, Config, ConfigError, _plain, config_from_dict, load_config, validate_config
from agentrl.config.harness_paths import check_harness_program
from agentrl.config.schedule import check_schedule
from agentrl.credit import validate_estimator_kwargs
from agentrl.credit.registry import check_group_by_version, get_estimator, tree_estimators
from agentrl.env import preflight, validate_id

__all__ = ["check_config", "load_checked_config", "checked_config_from_dict", "estimator_docstring"]


def load_checked_config(path: str | Path, overrides: Sequence[str] = ()) -> Config:
    """``agentrl.config.load_config`` followed by ``check_config``: the config of a run,
    checked against every registry, with every default in effect (estimator kwargs included).

    Raises:
        ConfigError: see ``agentrl.config.load_config`` and ``check_config``.
    """
    return check_config(load_config(path, overrides))


def checked_config_from_dict(raw: Mapping[str, Any], overrides: Sequence[str] = ()) -> Config:
    """``agentrl.config.config_from_dict`` followed by ``check_config``.

    Raises:
        ConfigError: see ``agentrl.config.config_from_dict`` and ``check_config``.
    """
    return check_config(config_from_dict(raw, overrides))


def check_config(cfg: Config) -> Config:
    """Check ``cfg`` against the registries and return it with every default in effect.

    Runs ``agentrl.config.validate_config`` (defaults that need no registry), then: the env id
    must be registered (P10) and the env kwargs of the train split (and of the eval split when
    evaluating) pass the env's preflight; ``update.loss`` names a registered loss; the
    estimator's kwargs bind to its signature and its keyword defaults are filled into
    ``algorithm.kwargs`` (PITFALLS P4; turn-PPO's critic reads them); the estimator suits
    ``rollout.sampler``, ``algorithm.group_by_version`` and ``policy.action_format``.
    Idempotent: a checked config comes back equal.

    Raises:
        ConfigError: unknown env id or estimator, kwargs that do not bind, or a chain
            estimator with ``rollout.sampler: tree | rtpo``; env kwargs the env refuses
            (keyword, split, missing data: ``agentrl.env.preflight``); an unknown loss;
            ``group_by_version`` with an estimator whose groups are not task groups; HiPER
            without ``policy.action_format: hiper``; a declared step scorer or store query
            nobody registered; an unparsable ``policy.action_format``; ``update.kl_coef`` > 0 (no
            reference model is loaded by the trainer); a harness program that does not exist
            (``agentrl.config.harness_paths``); ``reward.judge`` with ``rollout.sampler: rtpo``
            (its rounds update between rollouts; the judge scores the chain loop's episodes); and
            what ``validate_config`` raises.
    """
    cfg = validate_config(cfg)
    _validate_env_id(cfg.env.id)
    _validate_env_kwargs(cfg)
    _validate_loss(cfg.update.loss)
    algorithm = cfg.algorithm
    algorithm = dataclasses.replace(algorithm, kwargs=_resolve_estimator_kwargs(algorithm.estimator, algorithm.kwargs))
    algorithm = _resolve_scorers_and_schedule(algorithm)
    _validate_tree_estimator(algorithm.estimator, cfg.rollout.sampler)
    _validate_group_by_version(algorithm.estimator, algorithm.group_by_version)
    _validate_action_format(algorithm.estimator, cfg.policy.action_format)
    _validate_declarations(algorithm.estimator)
    if cfg.rollout.harness is not None:  # a missing program aborted every episode of a run that exited 0 (issue 53)
        check_harness_program(cfg.rollout.harness.command)
    if cfg.reward.judge is not None and cfg.rollout.sampler == "rtpo":
        raise ConfigError("reward.judge is not supported with rollout.sampler: rtpo yet (its reverse-turn rounds "
                          "are scored inside the update); use sampler chain or tree, or reward.judge: null")
    if cfg.update.kl_coef > 0:  # the trainer loads no frozen reference: refused here, not after the first rollout
        raise ConfigError(f"update.kl_coef={cfg.update.kl_coef} asks for a KL penalty to a frozen reference model, which "
                          "the trainer does not load yet (the update step supports it given reference logprobs: "
                          "agentrl.update.step.update); set update.kl_coef: 0")
    return dataclasses.replace(cfg, algorithm=algorithm)


def estimator_docstring(name: str) -> str:
    """The docstring of the estimator registered as ``name`` ("" for an unknown name): its
    ``Args:`` document ``algorithm.kwargs`` (``agentrl.config.docs.describe_config``)."""
    try:
        return inspect.getdoc(get_estimator(name).fn) or ""
    except KeyError:
        return ""


# --------------------------------------------------------------------------- env (L1)


def _validate_env_id(env_id: str) -> None:
    try:
        validate_id(env_id)
    except KeyError as exc:
        raise ConfigError(f"env.id: {exc.args[0]}") from None


def _validate_env_kwargs(cfg: Config) -> None:
    """Pre-flight the env kwargs of the train split and, when evaluation is on, of the eval
    split (``agentrl.env.preflight``): keywords, split and data, before any worker or model
    starts (issue 20 item 7). Raises ConfigError naming the key."""
    env = cfg.env
    evaluating = cfg.run.eval_every > 0 and env.eval_panel_size > 0
    splits = [("env.split", env.split)] + ([("env.eval_split", env.eval_split)] if evaluating else [])
    try:  # the trainer builds the env with split and max_turns added (agentrl.eval.env_kwargs)
        preflight.check_env_keywords(env.id, {**env.kwargs, **({"split": env.split} if env.split else {}),
                                              "max_turns": env.kwargs.get("max_turns", env.max_turns)})
    except ValueError as exc:
        raise ConfigError(f"env.kwargs: {exc}") from None
    for key, split in splits:
        kwargs = {**env.kwargs, **({"split": split} if split else {})}
        try:
            if split:
                preflight.check_env_split(env.id, split)
            preflight.check_env_data(env.id, kwargs)
        except FileNotFoundError as exc:  # DataMissingError: the message names the folder and the fix
            raise ConfigError(f"env: {exc}") from None
        except ValueError as exc:
            raise ConfigError(f"{key}: {exc}") from None


# --------------------------------------------------------------------------- update (L3)


def _validate_loss(name: str) -> None:
    """``update.loss`` must be a registered policy loss (checked before any rollout)."""
    try:
        from agentrl.update.losses import LOSSES  # torch: only when checking
    except ModuleNotFoundError as exc:
        if exc.name in ("torch", "agentrl.update.losses"):
            return  # an install without the llm extra cannot train; load_policy says so
        raise
    try:
        LOSSES.get(name)
    except KeyError as exc:
        raise ConfigError(f"update.loss: {exc.args[0]}") from None


# --------------------------------------------------------------------------- credit (L3)


def _resolve_estimator_kwargs(name: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``kwargs`` against the estimator's signature and return them with every
    default in effect filled in."""
    try:
        resolved = validate_estimator_kwargs(name, dict(kwargs))
    except KeyError as exc:
        raise ConfigError(f"algorithm.estimator: {exc.args[0]}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"algorithm.kwargs for estimator {name!r}: {exc}") from None
    return _plain(dict(resolved if isinstance(resolved, Mapping) else kwargs))


def _validate_tree_estimator(name: str, sampler: str) -> None:
    """``rollout.sampler: tree | rtpo`` needs an estimator that accepts trees (ConfigError)."""
    if sampler == "chain":
        return
    if not get_estimator(name).accepts_trees:
        raise ConfigError(f"rollout.sampler: {sampler} stores trees, but algorithm.estimator {name!r} scores chains "
                          f"(its advantages would depend on which branch is stored as a turn's chain); use one of "
                          f"{tree_estimators()} or rollout.sampler: chain")


def _validate_group_by_version(name: str, on: bool) -> None:
    """``algorithm.group_by_version: true`` needs an estimator whose groups are task groups (ConfigError)."""
    if not on:
        return
    try:
        check_group_by_version(name)
    except ValueError as exc:
        raise ConfigError(f"algorithm.group_by_version: {exc}") from None


def _validate_action_format(name: str, action_format: str) -> None:
    """``policy.action_format`` must parse (``agentrl.rollout.parsing.parse_format``), and an estimator
    that declares an action format (``register_estimator(action_format=...)``; HiPER: ``hiper``, whose
    tags fill its columns and spans) needs the agent loop to write and parse that format:
    ``policy.action_format`` must be it (ConfigError naming both and the fix)."""
    from agentrl.rollout.parsing import parse_format

    try:
        parse_format(action_format)
    except ValueError as exc:
        raise ConfigError(f"policy.action_format: {exc}") from None
    needed = get_estimator(name).declares.action_format
    if needed is not None:
        try:
            parse_format(needed)
        except ValueError as exc:
            raise ConfigError(f"algorithm.estimator {name!r} declares an action format the agent loop does not know "
                              f"({exc}); fix its register_estimator(action_format=...)") from None
    if needed is not None and action_format != needed:
        raise ConfigError(f"algorithm.estimator {name!r} reads what the {needed!r} action format parses from every "
                          f"turn (e.g. HiPER's <switch>/<subgoal>/<action> tags), but policy.action_format is "
                          f"{action_format!r}; set policy.action_format: {needed}")


def _resolve_scorers_and_schedule(algorithm: AlgorithmConfig) -> AlgorithmConfig:
    """``algorithm.scorers`` (the declared scorers' options, defaults filled in) and
    ``algorithm.schedule`` (numeric keywords of the estimator) checked (ConfigError)."""
    from agentrl.train.scorers import resolve_scorer_options

    try:
        scorers = resolve_scorer_options(algorithm.estimator, algorithm.scorers)
    except KeyError:  # an unknown estimator: _resolve_estimator_kwargs has said so already
        scorers = dict(algorithm.scorers)
    schedule = check_schedule(algorithm.schedule, algorithm.kwargs, algorithm.estimator)
    return dataclasses.replace(algorithm, scorers=scorers, schedule=schedule)


def _validate_declarations(name: str) -> None:
    """What the estimator declares must exist before any rollout: its step scorers
    (``agentrl.train.scorers``) and its store query (``agentrl.store.queries``) (ConfigError)."""
    from agentrl.store import get_store_query, list_store_queries
    from agentrl.train.scorers import check_declared_scorers

    check_declared_scorers(name)
    query = get_estimator(name).declares.store_query
    if query is not None:
        try:
            get_store_query(query)
        except KeyError:
            raise ConfigError(f"algorithm.estimator {name!r} declares the store query {query!r}, which is not "
                              f"registered (registered: {', '.join(list_store_queries())}); register it with "
                              "agentrl.store.register_store_query") from None

"""Config validation: names checked against the registries, every default in effect filled in,
and the ``auto`` settings resolved (``validate_config``, ``resolve_rollout_correction``,
``resolve_master_weights``; re-exported by ``agentrl.config``, which builds the dataclasses).

Layer L0: the env registry (L1) and the estimator registry (L3) are reached through
``importlib`` at call time, so importing this module never pulls in gymnasium, NumPy
estimators or torch. Errors are ``ConfigError`` naming the dotted key and the fix.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentrl.config.sections import Config, ConfigError


# --------------------------------------------------------------------------- validation


def _validate_env_id(env_id: str) -> None:
    env = importlib.import_module("agentrl.env")  # L1, looked up at call time (see module doc)
    try:
        env.validate_id(env_id)
    except KeyError as exc:
        raise ConfigError(f"env.id: {exc.args[0]}") from None


def _validate_env_kwargs(cfg: Config) -> None:
    """Pre-flight the env kwargs of the train split and, when evaluation is on, of the eval
    split (``agentrl.env.preflight``): keywords, split and data, before any worker or model
    starts (issue 20 item 7). Raises ConfigError naming the key."""
    pre = importlib.import_module("agentrl.env.preflight")  # L1, looked up at call time
    env = cfg.env
    evaluating = cfg.run.eval_every > 0 and env.eval_panel_size > 0
    splits = [("env.split", env.split)] + ([("env.eval_split", env.eval_split)] if evaluating else [])
    try:  # the trainer builds the env with split and max_turns added (agentrl.eval.env_kwargs)
        pre.check_env_keywords(env.id, {**env.kwargs, **({"split": env.split} if env.split else {}),
                                        "max_turns": env.kwargs.get("max_turns", env.max_turns)})
    except ValueError as exc:
        raise ConfigError(f"env.kwargs: {exc}") from None
    for key, split in splits:
        kwargs = {**env.kwargs, **({"split": split} if split else {})}
        try:
            if split:
                pre.check_env_split(env.id, split)
            pre.check_env_data(env.id, kwargs)
        except FileNotFoundError as exc:  # DataMissingError: the message names the folder and the fix
            raise ConfigError(f"env: {exc}") from None
        except ValueError as exc:
            raise ConfigError(f"{key}: {exc}") from None


def _validate_out_dir(out_dir: str, name: str) -> None:
    """``run.out_dir`` (and the run folder in it) must be folders or not exist yet; a file on
    the way is a ConfigError (issue 20 item 9)."""
    run_dir = Path(out_dir) / name
    for p in (run_dir, *run_dir.parents):
        if p.exists() and not p.is_dir():
            key = "run.name" if p == run_dir else "run.out_dir"
            raise ConfigError(f"{key}: {p} is a file, not a folder; set run.out_dir to a folder (created if missing)"
                              f" or move the file away")


def _validate_loss(name: str) -> None:
    """``update.loss`` must be a registered policy loss (checked before any rollout)."""
    try:
        losses = importlib.import_module("agentrl.update.losses")  # L3 + torch, looked up at call time
    except ModuleNotFoundError as exc:
        if exc.name in ("torch", "agentrl.update.losses"):
            return  # an install without the llm extra cannot train; load_policy says so
        raise
    try:
        losses.LOSSES.get(name)
    except KeyError as exc:
        raise ConfigError(f"update.loss: {exc.args[0]}") from None


def _resolve_estimator_kwargs(name: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``kwargs`` against the estimator's signature and return them with every
    default in effect filled in. Skipped (kwargs returned as given) only when the package
    ``agentrl.credit`` is not installed."""
    try:
        credit = importlib.import_module("agentrl.credit")  # L3, looked up at call time
    except ModuleNotFoundError as exc:
        if exc.name not in ("agentrl.credit",):
            raise
        return dict(kwargs)
    validate = getattr(credit, "validate_estimator_kwargs", None)
    if validate is None:  # a partial install without the registry
        return dict(kwargs)
    try:
        resolved = validate(name, dict(kwargs))
    except KeyError as exc:
        raise ConfigError(f"algorithm.estimator: {exc.args[0]}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"algorithm.kwargs for estimator {name!r}: {exc}") from None
    return _plain(dict(resolved if isinstance(resolved, Mapping) else kwargs))


def validate_config(cfg: Config, *, check_registries: bool = True) -> Config:
    """Check names against the registries and return ``cfg`` with defaults in effect filled.

    Fills ``update.sum_norm_tokens`` (default ``policy.max_tokens``), resolves
    ``update.rollout_correction: auto`` (``resolve_rollout_correction``) and
    ``update.master_weights: auto`` (``resolve_master_weights``), and fills the
    estimator's keyword defaults into ``algorithm.kwargs``. With ``check_registries`` (default) the env
    id must be registered (P10) and the estimator kwargs must bind to its signature.
    Raises:
        ConfigError: unknown env id or estimator, kwargs that do not bind, or a chain
            estimator with ``rollout.sampler: tree | rtpo``; env kwargs the env refuses
            (keyword, split, missing data: ``agentrl.env.preflight``); a file where
            ``run.out_dir`` needs a folder; HiPER without ``policy.action_format: hiper``.
    """
    update = cfg.update
    if update.sum_norm_tokens is None:
        update = dataclasses.replace(update, sum_norm_tokens=cfg.policy.max_tokens)
    if update.rollout_correction == "auto":
        update = dataclasses.replace(update, rollout_correction=resolve_rollout_correction(cfg))
    update = dataclasses.replace(update, master_weights=resolve_master_weights(cfg))
    algorithm = cfg.algorithm
    _validate_out_dir(cfg.run.out_dir, cfg.run.name)
    if check_registries:
        _validate_env_id(cfg.env.id)
        _validate_env_kwargs(cfg)
        _validate_loss(update.loss)
        algorithm = dataclasses.replace(algorithm, kwargs=_resolve_estimator_kwargs(algorithm.estimator, algorithm.kwargs))
        _validate_tree_estimator(algorithm.estimator, cfg.rollout.sampler)
        _validate_group_by_version(algorithm.estimator, algorithm.group_by_version)
        _validate_hiper_tags(algorithm.estimator, cfg.policy.action_format)
    return dataclasses.replace(cfg, update=update, algorithm=algorithm)


def resolve_rollout_correction(cfg: Config) -> str:
    """What ``update.rollout_correction: auto`` means for ``cfg``: ``tis`` when the sampler is
    not the trained model itself — ``policy.engine`` other than ``hf`` (vLLM samples with its
    own kernels), a half-precision ``policy.dtype`` (KV-cache sampling vs the full forward of
    the update) or ``rollout.engines`` ≥ 1 (engine-worker copies, possibly versions behind) —
    else ``none`` (the in-process fp32 HF engine samples from the very model that trains).
    An explicit value is returned unchanged."""
    if cfg.update.rollout_correction != "auto":
        return cfg.update.rollout_correction
    p = cfg.policy
    copy = p.engine != "hf" or p.dtype != "float32" or cfg.rollout.engines >= 1
    return "tis" if copy else "none"


def _validate_group_by_version(name: str, on: bool) -> None:
    """``algorithm.group_by_version: true`` needs an estimator whose groups are task groups (ConfigError)."""
    if not on:
        return
    try:
        registry = importlib.import_module("agentrl.credit.registry")
    except ModuleNotFoundError:
        return
    try:
        registry.check_group_by_version(name)
    except ValueError as exc:
        raise ConfigError(f"algorithm.group_by_version: {exc}") from None


def resolve_master_weights(cfg: Config) -> str:
    """``update.master_weights`` in effect: ``auto`` is ``on`` for full fine-tuning (no LoRA) with
    a half-precision ``policy.dtype``, else ``off``.

    Raises:
        ConfigError: ``on`` with LoRA (peft's adapters are float32 already) or with
            ``policy.dtype: float32`` (float32 weights are their own masters).
    """
    mode, half = cfg.update.master_weights, cfg.policy.dtype != "float32"
    if mode == "on" and (cfg.policy.lora is not None or not half):
        why = "LoRA adapters are float32 already" if cfg.policy.lora is not None else "policy.dtype is float32"
        raise ConfigError(f"update.master_weights: on is for full fine-tuning in bfloat16/float16, but {why}; "
                          "set update.master_weights: auto (or off)")
    return ("on" if half and cfg.policy.lora is None else "off") if mode == "auto" else mode


def _validate_tree_estimator(name: str, sampler: str) -> None:
    """``rollout.sampler: tree | rtpo`` needs an estimator that accepts trees (ConfigError)."""
    if sampler == "chain":
        return
    try:
        registry = importlib.import_module("agentrl.credit.registry")
    except ModuleNotFoundError:
        return
    if not registry.get_estimator(name).accepts_trees:
        raise ConfigError(f"rollout.sampler: {sampler} stores trees, but algorithm.estimator {name!r} scores chains "
                          f"(its advantages would depend on which branch is stored as a turn's chain); use one of "
                          f"{registry.tree_estimators()} or rollout.sampler: chain")


def _validate_hiper_tags(name: str, action_format: str) -> None:
    """An estimator that reads HiPER's ``switch`` column needs the agent loop to parse the tags:
    ``policy.action_format: hiper`` (ConfigError)."""
    try:
        registry = importlib.import_module("agentrl.credit.registry")
    except ModuleNotFoundError:
        return
    if "switch" in registry.get_estimator(name).requires and action_format != "hiper":
        raise ConfigError(f"algorithm.estimator {name!r} reads the <switch>/<subgoal>/<action> tags of every turn "
                          f"(ALGORITHMS.md §14.2), but policy.action_format is {action_format!r}; set "
                          "policy.action_format: hiper")


def _plain(v: Any) -> Any:
    if dataclasses.is_dataclass(v):
        return {f.name: _plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, Mapping):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v

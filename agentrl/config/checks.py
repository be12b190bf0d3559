"""Config checks that need no registry: every default in effect filled in, the ``auto``
settings resolved and ``run.out_dir`` a folder (``validate_config``,
``resolve_rollout_correction``, ``resolve_master_weights``; re-exported by ``agentrl.config``,
which builds the dataclasses).

Layer L0: imports only the config sections. The checks against the registries above (env id
and env kwargs, loss, estimator kwargs and its rules) are ``agentrl.train.checks.check_config``.
Errors are ``ConfigError`` naming the dotted key and the fix.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentrl.config.sections import Config, ConfigError


# --------------------------------------------------------------------------- validation


def _validate_out_dir(out_dir: str, name: str) -> None:
    """``run.out_dir`` (and the run folder in it) must be folders or not exist yet; a file on
    the way is a ConfigError (issue 20 item 9)."""
    run_dir = Path(out_dir) / name
    for p in (run_dir, *run_dir.parents):
        if p.exists() and not p.is_dir():
            key = "run.name" if p == run_dir else "run.out_dir"
            raise ConfigError(f"{key}: {p} is a file, not a folder; set run.out_dir to a folder (created if missing)"
                              f" or move the file away")


def validate_config(cfg: Config) -> Config:
    """Return ``cfg`` with the defaults in effect filled in (no registry is consulted).

    Fills ``update.sum_norm_tokens`` (default ``policy.max_tokens``), resolves
    ``update.rollout_correction: auto`` (``resolve_rollout_correction``) and
    ``update.master_weights: auto`` (``resolve_master_weights``). Idempotent. The env id, the
    loss and the estimator's kwargs (its defaults filled into ``algorithm.kwargs``) are checked
    by ``agentrl.train.checks.check_config``, which runs this first.
    Raises:
        ConfigError: a file where ``run.out_dir`` (or the run folder in it) needs a folder;
            ``update.master_weights: on`` with LoRA or float32 weights; ``update.sampler_kl_every``
            other than 1 where ``rollout_correction: auto`` resolves to a correcting mode (the
            resolved ``UpdateConfig``'s own check).
    """
    update = cfg.update
    if update.sum_norm_tokens is None:
        update = dataclasses.replace(update, sum_norm_tokens=cfg.policy.max_tokens)
    if update.rollout_correction == "auto":
        update = dataclasses.replace(update, rollout_correction=resolve_rollout_correction(cfg))
    update = dataclasses.replace(update, master_weights=resolve_master_weights(cfg))
    _validate_out_dir(cfg.run.out_dir, cfg.run.name)
    return dataclasses.replace(cfg, update=update)


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


def _plain(v: Any) -> Any:
    if dataclasses.is_dataclass(v):
        return {f.name: _plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, Mapping):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v

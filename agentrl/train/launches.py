"""Launches of one run folder: is a relaunch the same run, and what each launch ran with.

A run folder's ``config.yaml`` is the config the run was started with; it is never rewritten.
Relaunching ``agentrl train`` on a folder that has a checkpoint resumes it only when the new
effective config equals that one, apart from the keys of ``RESUME_MAY_CHANGE`` (schedule,
logging, placement and memory knobs: ``run.iterations=3`` continues a 2-iteration run);
any other difference is refused with the differing keys, unless the launch forces it
(``agentrl train --resume``), which logs them (issue 20 item 8, issue 23 item 4).

Every launch is recorded: ``launches/<NNN>.yaml`` holds its effective config and one line of
``launches.jsonl`` says when, with which config file and overrides, from which checkpoint,
and what differed from ``config.yaml``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from agentrl.config import Config, ConfigError, config_from_dict, to_dict

__all__ = ["RESUME_MAY_CHANGE", "Launch", "ConfigChange", "config_changes", "check_resumable", "record_launch"]

#: Dotted keys (a trailing ``.`` covers a section) that may differ when a run resumes: they
#: change how long, where and how observably it runs, not what it learns from.
RESUME_MAY_CHANGE = (
    "run.iterations", "run.eval_every", "run.save_every", "run.out_dir", "run.eval_seed", "run.eval_before", "log.",
    "policy.num_threads", "policy.device", "policy.max_batch", "policy.prefix_cache_mb",
    "policy.decode_attention",
    "rollout.num_workers", "rollout.step_timeout_s", "rollout.backend", "rollout.placement.",
    "rollout.harness.timeout_s", "rollout.harness.max_parallel",
    "update.micro_batch", "update.gradient_checkpointing", "update.share_prefix", "update.micro_batch_tokens",
    "update.audit",
)

LAUNCHES_DIR, LAUNCHES_LOG = "launches", "launches.jsonl"


@dataclass(frozen=True)
class Launch:
    """How this launch was asked for, recorded in ``launches.jsonl``: the config file (None
    from the Python API) and the ``key=value`` overrides applied to it."""

    config_path: str | None = None
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True)
class ConfigChange:
    """One dotted key whose value differs between the run's config.yaml (``old``; None when
    absent) and this launch's config (``new``)."""

    key: str
    old: Any
    new: Any

    @property
    def may_change(self) -> bool:
        """True when the key is one of ``RESUME_MAY_CHANGE``."""
        return any(self.key == k or (k.endswith(".") and self.key.startswith(k)) for k in RESUME_MAY_CHANGE)

    def __str__(self) -> str:
        return f"{self.key}: {self.old!r} -> {self.new!r}"


def _flat(d: Mapping, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def _stored(run_dir: Path) -> dict | None:
    """The run's config.yaml with every default of this version filled in (None: no file)."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        return None
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    try:
        return to_dict(config_from_dict(raw))
    except ConfigError:  # written by another version: compare what it says
        return raw


def config_changes(run_dir: Path, cfg: Config) -> list[ConfigChange] | None:
    """The keys in which ``cfg`` differs from ``run_dir/config.yaml`` (sorted by key); None
    when the folder has no config.yaml."""
    stored = _stored(run_dir)
    if stored is None:
        return None
    old, new = _flat(stored), _flat(to_dict(cfg))
    return [ConfigChange(k, old.get(k), new.get(k)) for k in sorted(old.keys() | new.keys()) if old.get(k) != new.get(k)]


def _listing(changes: list[ConfigChange], limit: int = 8) -> str:
    shown = "; ".join(map(str, changes[:limit]))
    return shown + (f"; and {len(changes) - limit} more" if len(changes) > limit else "")


def check_resumable(run_dir: Path, cfg: Config, force: bool) -> list[ConfigChange]:
    """The config changes of a resume of ``run_dir`` with ``cfg`` (logged when any).

    Raises:
        ConfigError: a key outside ``RESUME_MAY_CHANGE`` differs and ``force`` is False (one
            line: the differing keys and the ways out).
    """
    changes = config_changes(run_dir, cfg) or []
    blocking = [c for c in changes if not c.may_change]
    if blocking and not force:
        raise ConfigError(
            f"run folder {run_dir} holds a run started with another config: {_listing(blocking)}. Resume it with its "
            f"own config (agentrl train {run_dir / 'config.yaml'}; run.iterations, eval/save frequency and log.* may "
            f"differ), pass --resume to continue it with these changes, --no-resume to start afresh (the old run is "
            f"moved to {run_dir.name}.prev-<time>), or set another run.name")
    if changes:
        logging.getLogger(__name__).warning("resuming %s with a changed config%s: %s", run_dir,
                                            " (forced by --resume)" if blocking else "", _listing(changes, 20))
    return changes


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def record_launch(run_dir: Path, cfg: Config, launch: Launch | None, *, resumed_from: Path | None,
                  changes: list[ConfigChange], forced: bool) -> int:
    """Write ``launches/<NNN>.yaml`` (this launch's effective config) and append a line to
    ``launches.jsonl``; returns the launch number (1 for the first)."""
    log = run_dir / LAUNCHES_LOG
    n = 1 + (sum(1 for line in log.read_text(encoding="utf-8").splitlines() if line.strip()) if log.is_file() else 0)
    folder = run_dir / LAUNCHES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    cfg_path = folder / f"{n:03d}.yaml"
    cfg_path.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False, allow_unicode=True), encoding="utf-8")
    launch = launch or Launch()
    record = {"launch": n, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "config_file": launch.config_path,
              "overrides": list(launch.overrides), "config": cfg_path.relative_to(run_dir).as_posix(),
              "resumed_from": None if resumed_from is None else _relative(Path(resumed_from), run_dir),
              "changed": {c.key: [c.old, c.new] for c in changes}, "forced": bool(forced)}
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, default=str) + "\n")
    return n

"""The run folder of ``agentrl train``: set a previous run aside on a fresh start, write the
config (once: a resume never rewrites it), find the checkpoint to resume from (only for the
same config, ``agentrl.train.launches``), record each launch, and move the episodes of an
interrupted iteration aside on resume (PITFALLS P7). Rank 0 alone calls these in a
data-parallel run."""

from __future__ import annotations

import fcntl
import logging
import os
import time
from pathlib import Path

import yaml

from agentrl.config import Config, to_dict
from agentrl.store import INTERRUPTED, TurnStore
from agentrl.train.launches import Launch, check_resumable, record_launch
from agentrl.update.checkpoint import TrainState, latest_checkpoint

__all__ = ["RunLock", "prepare_run_dir", "set_aside", "set_aside_interrupted"]


class RunLock:
    """An exclusive lock on a run folder for the length of one ``agentrl train`` (``with
    RunLock(run_dir): ...``): a second job on the same run (which would resume from the
    first one's checkpoint and interleave its episodes and checkpoints) is refused at once.
    The lock is ``fcntl.flock`` on ``<out_dir>/.<name>.lock`` (beside the folder, which a
    fresh start renames); the OS drops it when the process dies, so a crash leaves no stale
    lock. The file holds the holder's pid.

    Raises (on enter):
        ValueError: the run is in use by another live process (names it and the fix).
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir).with_name(f".{Path(run_dir).name}.lock")
        self._fd: int | None = None

    def __enter__(self) -> "RunLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise ValueError(f"run folder {self.path.with_name(self.path.name[1:-5])} is in use by another agentrl "
                             f"train (pid {holder}); wait for it to finish, or set another run.name / run.out_dir") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def prepare_run_dir(cfg: Config, run_dir: Path, resume: bool, *, force_resume: bool = False,
                    launch: Launch | None = None) -> Path | None:
    """Return the checkpoint to resume from (None: a fresh start) and record this launch.

    A fresh start (``resume`` False, or no checkpoint) sets a previous run aside and writes
    config.yaml; a resume keeps the run's config.yaml as it is and goes on only when this
    config matches it (``launches.check_resumable``; ``force_resume`` accepts any change).
    Either way ``launches/<NNN>.yaml`` and a line of ``launches.jsonl`` record the launch.

    Raises:
        ConfigError: a resume with a different config, not forced (lists the differing keys).
    """
    ckpt = latest_checkpoint(run_dir) if resume else None
    changes = []
    if ckpt is None:
        set_aside(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    else:
        changes = check_resumable(run_dir, cfg, force_resume)
        if not (run_dir / "config.yaml").is_file():  # a folder from before config.yaml existed
            (run_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    record_launch(run_dir, cfg, launch, resumed_from=ckpt, changes=changes,
                  forced=force_resume and any(not c.may_change for c in changes))
    return ckpt


def set_aside_interrupted(store: TurnStore, run_id: str, state: TrainState, first_episode_id: int) -> list[int]:
    """On resume: the episodes the checkpoint ``state`` does not cover — those a later iteration
    than ``state.iteration`` stored (each stored episode carries its iteration,
    ``agentrl.store.iterations``; an untagged one, of an older store, counts when its id is
    ``>= first_episode_id``, the first id of iteration ``state.iteration``), whatever policy
    version sampled them — move to the run ``<run_id>.interrupted-<YYYYmmdd-HHMMSS>`` of the same
    store, so the resumed run re-plays them exactly once (PITFALLS P7; under
    ``rollout.max_staleness`` ≥ 1 an interrupted iteration can hold only older versions and
    groups of a later production). Returns the moved episode ids."""
    runs = set(store.runs())
    to_run = _stamped(f"{run_id}{INTERRUPTED}", lambda name: name in runs)
    moved = store.split_off(run_id, after_iteration=state.iteration, from_episode_id=first_episode_id,
                            to_run_id=to_run)
    if moved:
        logging.getLogger(__name__).warning(
            "resume from iteration %d: %d episode(s) stored after that checkpoint (ids %d..%d) were moved to run %r "
            "of %s; they are re-played now", state.iteration, len(moved), moved[0], moved[-1], to_run, store.path)
    return moved


def set_aside(run_dir: Path) -> Path | None:
    """A fresh start in a run folder that already holds a store or checkpoints: rename the
    folder to ``<name>.prev-<YYYYmmdd-HHMMSS>`` (nothing stored is lost; the store is
    append-only, so the new run's episode ids would collide with the old ones). Returns
    the new path, or None when there was nothing to set aside."""
    if not ((run_dir / "store.sqlite").exists() or (run_dir / "checkpoints").exists()):
        return None
    target = run_dir.with_name(_stamped(f"{run_dir.name}.prev-", lambda name: run_dir.with_name(name).exists()))
    run_dir.rename(target)
    logging.getLogger(__name__).warning("fresh run: the previous contents of %s were moved to %s", run_dir, target)
    return target


def _stamped(prefix: str, taken) -> str:
    """``<prefix><YYYYmmdd-HHMMSS>``, with ``-1``, ``-2``, ... appended while ``taken(name)``."""
    name = stamp = f"{prefix}{time.strftime('%Y%m%d-%H%M%S')}"
    n = 1
    while taken(name):
        name, n = f"{stamp}-{n}", n + 1
    return name

"""TextWorld games generated offline with ``tw-make`` and cached by (family, params, seed).

Layout: ``$AGENTRL_CACHE/textworld/<family>/<k=v,...>/seed=<seed>/game.z8`` (plus
``game.json``, ``game.ni``); ``AGENTRL_CACHE`` defaults to ``~/.cache/agentrl``. A game is
generated once (~2–6 s, a ``tw-make`` subprocess) under a file lock (``filelock``), so
parallel workers asking for the same game wait for one generation instead of repeating it;
the game directory appears atomically (generated in a temporary sibling, then renamed).

Train and eval tasks come from disjoint, fixed seed ranges: task ``i`` of split ``s`` is
seed ``SPLIT_SEED_BASE[s] + i`` (train: 0.., eval: 1,000,000..), ``0 <= i < 1,000,000``.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from agentrl.env import MissingExtraError

FAMILIES = ("custom", "tw-coin_collector", "tw-treasure_hunter", "tw-simple", "tw-cooking")
SPLIT_SEED_BASE = {"train": 0, "eval": 1_000_000}
SPLIT_SIZE = 1_000_000
ParamValue = int | str | bool


def task_seed(split: str, index: int) -> int:
    """Game seed of task ``index`` of ``split`` ("train" | "eval"); ranges are disjoint.

    Raises: ValueError for an unknown split or an index outside [0, 1e6).
    """
    if split not in SPLIT_SEED_BASE:
        raise ValueError(f"unknown split {split!r}; use one of {sorted(SPLIT_SEED_BASE)}")
    if not 0 <= index < SPLIT_SIZE:
        raise ValueError(f"task index must be in [0, {SPLIT_SIZE}), got {index}")
    return SPLIT_SEED_BASE[split] + index


@dataclass(frozen=True)
class GameSpec:
    """One game: a ``tw-make`` family, its CLI params (``world_size=2`` → ``--world-size 2``;
    ``True`` → a bare flag such as ``--open``; ``False`` → omitted, also from the key) and
    the seed."""

    family: str
    params: tuple[tuple[str, ParamValue], ...]
    seed: int

    @classmethod
    def make(cls, family: str, params: Mapping[str, ParamValue], seed: int) -> "GameSpec":
        """Validated, canonical (sorted params) spec. Raises ValueError on a bad family/param."""
        if family not in FAMILIES:
            raise ValueError(f"unknown TextWorld family {family!r}; use one of {FAMILIES}")
        for k, v in params.items():
            if not isinstance(v, (int, str, bool)) or not k.replace("_", "").replace("-", "").isalnum():
                raise ValueError(f"bad tw-make param {k}={v!r}: names are identifiers, values int/str/bool")
        canon = tuple(sorted((k.replace("_", "-"), v) for k, v in params.items() if v is not False))
        return cls(family, canon, int(seed))

    @property
    def key(self) -> str:
        """Cache key and task id, e.g. ``custom/nb-objects=3,quest-length=1,world-size=2/seed=7``."""
        ps = ",".join(f"{k}={v}" for k, v in self.params) or "default"
        return f"{self.family}/{ps}/seed={self.seed}"

    def tw_make_args(self, output: Path) -> list[str]:
        args = [self.family]
        for k, v in self.params:
            if v is True:
                args.append(f"--{k}")
            elif v is not False:
                args += [f"--{k}", str(v)]
        return args + ["--seed", str(self.seed), "--output", str(output), "--silent", "-f"]


def spec_digest(spec: GameSpec) -> str:
    """Content digest of a generated game (``agentrl.env.tasks``): SHA-256 of its family,
    params, seed and the installed TextWorld version (``tw-make`` output is a function of
    these), so a panel of generated games changes hash when the generator does."""
    from agentrl.env.tasks import content_digest

    return content_digest({"family": spec.family, "params": [list(p) for p in spec.params], "seed": spec.seed,
                           "textworld": _textworld_version()})


@functools.lru_cache(maxsize=1)
def _textworld_version() -> str:
    try:
        return importlib.metadata.version("textworld")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def cache_root() -> Path:
    """``$AGENTRL_CACHE/textworld`` (default ``~/.cache/agentrl/textworld``)."""
    return Path(os.environ.get("AGENTRL_CACHE", "~/.cache/agentrl")).expanduser() / "textworld"


def _tw_make() -> str:
    exe = Path(sys.executable).parent / "tw-make"
    found = str(exe) if exe.exists() else shutil.which("tw-make")
    if found is None:
        raise MissingExtraError("textworld (tw-make)", "textworld")
    return found


def ensure_game(spec: GameSpec, root: Path | None = None, timeout_s: float = 600.0) -> Path:
    """Path of the cached ``game.z8`` for ``spec``, generating it first if needed.

    Args:
        spec: the game. root: cache root (default ``cache_root()``).
        timeout_s: seconds allowed for ``tw-make`` (and for waiting on the lock).
    Raises:
        MissingExtraError: textworld / tw-make not installed.
        RuntimeError: tw-make failed (the message carries its stderr tail).
    """
    import filelock

    final = (root or cache_root()) / spec.key
    game = final / "game.z8"
    if game.exists():
        return game
    final.parent.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(final) + ".lock", timeout=timeout_s):
        if game.exists():  # another process generated it while we waited
            return game
        tmp = Path(tempfile.mkdtemp(prefix=".gen-", dir=final.parent))
        try:
            proc = subprocess.run([_tw_make(), *spec.tw_make_args(tmp / "game.z8")],
                                  capture_output=True, text=True, timeout=timeout_s)
            if proc.returncode != 0 or not (tmp / "game.z8").exists():
                raise RuntimeError(f"tw-make failed for {spec.key} (exit {proc.returncode}): "
                                   f"{(proc.stderr or proc.stdout)[-2000:]}")
            os.replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return game

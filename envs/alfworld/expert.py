"""Planner walkthroughs for ALFWorld games, computed once per game and cached on disk.

Fast Downward plans cost ~3.5 s per kept game (ENVIRONMENTS.md §2.4), so they are never
requested per step in rollouts. ``walkthrough(game_data)`` returns the cached plan or
computes it once; the cache key is the SHA-256 of the canonical JSON of the game dict
actually played (so the ``native`` and ``0.4.2`` wordings cache separately).

Cache folder: ``$AGENTRL_CACHE/alfworld/walkthroughs`` (default ``~/.cache/agentrl``), one
JSON list of command strings per game.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

from agentrl.env.contract import require_module
from agentrl_envs.textworld.engine_lock import ENGINE_LOCK


def cache_dir() -> Path:
    """``$AGENTRL_CACHE/alfworld/walkthroughs`` (``~/.cache/agentrl`` when unset)."""
    base = Path(os.environ.get("AGENTRL_CACHE") or Path.home() / ".cache" / "agentrl")
    return base / "alfworld" / "walkthroughs"


def game_key(game_data: Mapping[str, object]) -> str:
    """Hex SHA-256 of the canonical JSON (sorted keys) of a game dict."""
    return hashlib.sha256(json.dumps(game_data, sort_keys=True).encode("utf-8")).hexdigest()


def cached_walkthrough(game_data: Mapping[str, object]) -> list[str] | None:
    """The cached plan for this game, or ``None`` when not computed yet (no planner call)."""
    path = cache_dir() / f"{game_key(game_data)}.json"
    if not path.is_file():
        return None
    return list(json.loads(path.read_text(encoding="utf-8")))


def plan(game_data: Mapping[str, object]) -> list[str]:
    """Run the Fast Downward planner once on a game (≈0.1–4 s) and return the command list
    in the played wording (names demangled like the env, e.g. ``"go to desk 2"``).

    Raises:
        MissingExtraError: alfworld/textworld not installed.
        RuntimeError: the planner finds no plan (unsolvable game).
    """
    textworld = require_module("textworld", "alfworld")
    pddl = require_module("textworld.envs.pddl", "alfworld")
    tw_env = require_module("alfworld.agents.environment.alfred_tw_env", "alfworld")
    env = tw_env.AlfredDemangler(pddl.PddlEnv(textworld.EnvInfos(extras=["walkthrough"])))
    try:
        with ENGINE_LOCK:  # TextWorld's engines are not thread-safe (agentrl_envs.textworld.engine_lock)
            env.load(dict(game_data))
            commands = env.reset().get("extra.walkthrough")
    finally:
        env.close()
    if not commands:
        raise RuntimeError("the planner found no plan for this ALFWorld game (unsolvable)")
    return [str(c) for c in commands]


def store_walkthrough(game_data: Mapping[str, object], commands: list[str]) -> Path:
    """Write ``commands`` as the cached plan of ``game_data`` (atomic); return the path."""
    path = cache_dir() / f"{game_key(game_data)}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(list(commands)), encoding="utf-8")
    os.replace(tmp, path)
    return path


def walkthrough(game_data: Mapping[str, object]) -> list[str]:
    """Cached planner walkthrough: read from the cache, else ``plan`` once and store it.
    Raises what ``plan`` raises."""
    hit = cached_walkthrough(game_data)
    if hit is not None:
        return hit
    commands = plan(game_data)
    store_walkthrough(game_data, commands)
    return commands

"""Exact encoding of ``Turn`` fields as SQLite values and back.

Token ids are stored as little-endian int32 bytes, logprobs and hidden states as
little-endian float32 bytes (``ndarray.tobytes``), so every value round-trips bit for bit.
``info`` is JSON text; ``reward`` is NULL when unscored; ``hidden`` is NULL when absent.
"""

from __future__ import annotations

import json
import math
from typing import Sequence

import numpy as np

from agentrl.store.schema import TURN_BITS
from agentrl.types import Turn

_I32 = np.dtype("<i4")
_F32 = np.dtype("<f4")
_MAX_TURN_ID = 1 << TURN_BITS

#: Column order of ``turns`` rows produced by ``turn_row`` (after uid, run_key, turn_id).
TURN_COLUMNS = (
    "episode_id", "group_id", "t", "parent_turn_id", "policy_version", "observation", "anchor_obs",
    "next_anchor_obs", "action", "action_valid", "reward", "terminated", "truncated", "prompt_ids",
    "completion_ids", "completion_logprobs", "hidden", "info",
)


def blob_i32(a: np.ndarray) -> bytes:
    """int32[N] → N·4 bytes (little-endian)."""
    if a.dtype == _I32 and a.flags.c_contiguous:
        return a.tobytes()
    return np.ascontiguousarray(a, dtype=_I32).tobytes()


def blob_f32(a: np.ndarray) -> bytes:
    """float32[N] → N·4 bytes (little-endian)."""
    if a.dtype == _F32 and a.flags.c_contiguous:
        return a.tobytes()
    return np.ascontiguousarray(a, dtype=_F32).tobytes()


def from_i32(b: bytes) -> np.ndarray:
    """N·4 bytes → int32[N] (native byte order, writable copy)."""
    return np.frombuffer(b, dtype=_I32).astype(np.int32)


def from_f32(b: bytes) -> np.ndarray:
    """N·4 bytes → float32[N] (native byte order, writable copy)."""
    return np.frombuffer(b, dtype=_F32).astype(np.float32)


_JSON = json.JSONEncoder(allow_nan=False, separators=(",", ":"))


def encode_info(info: dict) -> str:
    """JSON text of a turn's ``info``; NaN/inf are refused so the text stays valid JSON.

    Raises:
        ValueError: ``info`` holds a value JSON cannot represent.
    """
    if not info:
        return "{}"
    try:
        return _JSON.encode(info)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"info is not JSON-serialisable ({exc}); keep Turn.info to small JSON values "
            f"(str, int, float, bool, None, lists, dicts with str keys)"
        ) from exc


def turn_row(turn: Turn, run_key: int, turn_id: int, episode_id: int, parent_turn_id: int | None) -> tuple:
    turn_id = int(turn_id)
    """The ``turns`` row of one turn: ``(uid, run_key, turn_id, *TURN_COLUMNS)`` with
    ``uid = run_key << TURN_BITS | turn_id``; ``episode_id`` replaces ``turn.episode_id``.

    Raises:
        ValueError: the reward is NaN/inf, ``info`` is not JSON, or the turn id is out of
            range (the message starts with ``turn t=...``).
    """
    reward = turn.reward
    try:
        if reward is not None:
            reward = float(reward)
            if not math.isfinite(reward):
                raise ValueError(f"reward is {reward}; use None for an unscored turn")
        if not 0 <= turn_id < _MAX_TURN_ID:
            raise ValueError(f"turn_id {turn_id} is outside [0, 2**{TURN_BITS}); use -1 to let the store assign it")
        info = encode_info(turn.info)
    except ValueError as exc:
        raise ValueError(f"turn t={turn.t}: {exc}") from exc
    hidden = None if turn.hidden is None else blob_f32(turn.hidden)
    return (
        (run_key << TURN_BITS) | turn_id, run_key, turn_id, episode_id, int(turn.group_id), int(turn.t),
        None if parent_turn_id is None else int(parent_turn_id), int(turn.policy_version), turn.observation, turn.anchor_obs, turn.next_anchor_obs, turn.action,
        bool(turn.action_valid), reward, bool(turn.terminated), bool(turn.truncated),
        blob_i32(turn.prompt_ids), blob_i32(turn.completion_ids), blob_f32(turn.completion_logprobs), hidden, info,
    )


def row_turn(run_id: str, turn_id: int, row: Sequence) -> Turn:
    """Inverse of ``turn_row``: ``row`` holds the ``TURN_COLUMNS`` values in order."""
    (episode_id, group_id, t, parent, version, obs, anchor, nxt, action, valid, reward, term, trunc,
     prompt, completion, logprobs, hidden, info) = row
    return Turn(
        run_id=run_id, turn_id=turn_id, episode_id=episode_id, group_id=group_id, t=t,
        parent_turn_id=parent, policy_version=version, observation=obs, anchor_obs=anchor,
        next_anchor_obs=nxt, action=action, action_valid=bool(valid), reward=reward,
        terminated=bool(term), truncated=bool(trunc), prompt_ids=from_i32(prompt),
        completion_ids=from_i32(completion), completion_logprobs=from_f32(logprobs),
        hidden=None if hidden is None else from_f32(hidden), info=json.loads(info),
    )

"""Exact encoding of ``Turn`` fields as SQLite values and back.

Token ids are stored as little-endian int32 bytes, logprobs and hidden states as
little-endian float32 bytes (``ndarray.tobytes``), so every value round-trips bit for bit.
``info`` is compact JSON text; ``reward`` is NULL when unscored; ``hidden`` is NULL when absent.
"""

from __future__ import annotations

import json
import math
import operator
from json import encoder as _json_encoder
from typing import Iterable, Iterator, Sequence

import numpy as np

from agentrl.store.schema import TURN_BITS
from agentrl.types import Turn

_I32 = np.dtype("<i4")
_F32 = np.dtype("<f4")
_NDARRAY = np.ndarray

#: Column order of ``turns`` rows produced by ``turn_rows`` (after uid, run_key, turn_id).
TURN_COLUMNS = (
    "episode_id", "group_id", "t", "parent_turn_id", "policy_version", "observation", "anchor_obs",
    "next_anchor_obs", "action", "action_valid", "reward", "terminated", "truncated", "prompt_ids",
    "completion_ids", "completion_logprobs", "hidden", "info",
)


def blob_i32(a: np.ndarray) -> bytes:
    """int32[N] → N·4 bytes (little-endian; any layout, other dtypes converted)."""
    if a.__class__ is _NDARRAY and a.dtype is _I32:  # fast path: tobytes copies in C order
        return a.tobytes()
    return np.ascontiguousarray(a, dtype=_I32).tobytes()


def blob_f32(a: np.ndarray) -> bytes:
    """float32[N] → N·4 bytes (little-endian; any layout, other dtypes converted)."""
    if a.__class__ is _NDARRAY and a.dtype is _F32:
        return a.tobytes()
    return np.ascontiguousarray(a, dtype=_F32).tobytes()


def from_i32(b: bytes) -> np.ndarray:
    """N·4 bytes → int32[N] (native byte order, writable copy)."""
    return np.frombuffer(b, dtype=_I32).astype(np.int32)


def from_f32(b: bytes) -> np.ndarray:
    """N·4 bytes → float32[N] (native byte order, writable copy)."""
    return np.frombuffer(b, dtype=_F32).astype(np.float32)


def _not_json(o: object) -> None:
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


# The standard library's C encoder built once (``json.dumps`` builds one per call, most of its
# cost for small dicts); same text as JSONEncoder(allow_nan=False, separators=(",", ":")).
# No circular-reference markers: a cycle ends in RecursionError. Returns a list of chunks.
if _json_encoder.c_make_encoder is not None:
    _encode_chunks = _json_encoder.c_make_encoder(None, _not_json, _json_encoder.encode_basestring_ascii, None,
                                                  ":", ",", False, False, False)
else:  # pure-Python json build
    _encode_py = json.JSONEncoder(allow_nan=False, separators=(",", ":")).encode

    def _encode_chunks(o: object, _level: int) -> list[str]:
        return [_encode_py(o)]


def encode_info(info: dict) -> str:
    """Compact JSON text of a turn's ``info``; NaN/inf are refused so the text stays valid JSON.

    Raises:
        ValueError: ``info`` holds a value JSON cannot represent (or a reference cycle).
    """
    if not info:
        return "{}"
    try:
        return "".join(_encode_chunks(info, 0))
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"info is not JSON-serialisable ({exc.__class__.__name__}: {exc}); keep Turn.info to small "
                         f"JSON values (str, int, float, bool, None, lists, dicts with str keys)") from exc


_FIELDS = operator.attrgetter(
    "group_id", "t", "policy_version", "observation", "anchor_obs", "next_anchor_obs", "action", "action_valid",
    "reward", "terminated", "truncated", "prompt_ids", "completion_ids", "completion_logprobs", "hidden", "info")


# The sqlite3 module binds int, float, str and bytearray directly; bytes, bool and None first
# go through its adapter registry (~0.5 µs each), so rows carry bytearray blobs and 0/1 flags.
def _bind_i32(a: np.ndarray) -> bytearray:
    return bytearray(blob_i32(a))


def _bind_f32(a: np.ndarray) -> bytearray:
    return bytearray(blob_f32(a))


def turn_rows(turns: Iterable[Turn], run_key: int, episode_id: int, turn_ids: Iterable[int],
              parents: Iterable[int | None]) -> Iterator[tuple]:
    """The ``turns`` rows of one episode's turns, lazily (one tuple per turn):
    ``(uid, run_key, turn_id, *TURN_COLUMNS)`` with ``uid = run_key << TURN_BITS | turn_id``.

    ``turn_ids`` (ints in ``[0, 2**TURN_BITS)``) and ``parents`` (int or ``None``) are the
    planned ids (``batch.assign_ids`` checks their range); ``episode_id`` replaces
    ``turn.episode_id``. Flags are 0/1 ints and token arrays ``bytearray`` blobs (the same
    stored values as ``bool`` and ``blob_i32``/``blob_f32``, bound faster).

    Raises:
        ValueError: a reward is NaN/inf or an ``info`` is not JSON (the message starts with
            ``turn t=...``).
    """
    base = run_key << TURN_BITS
    isfinite = math.isfinite
    for tr, tid, parent in zip(turns, turn_ids, parents):
        (gid, t, version, obs, anchor, nxt, action, valid, reward, term, trunc, prompt, completion, logprobs,
         hidden, info) = _FIELDS(tr)
        if reward is not None:
            reward = float(reward)
            if not isfinite(reward):
                raise ValueError(f"turn t={t}: reward is {reward}; use None for an unscored turn")
        try:
            info = encode_info(info)
        except ValueError as exc:
            raise ValueError(f"turn t={t}: {exc}") from exc
        yield (base | tid, run_key, tid, episode_id, int(gid), int(t), parent, int(version), obs, anchor, nxt, action,
               1 if valid else 0, reward, 1 if term else 0, 1 if trunc else 0, _bind_i32(prompt),
               _bind_i32(completion), _bind_f32(logprobs), None if hidden is None else _bind_f32(hidden), info)


def row_turn(run_id: str, turn_id: int, row: Sequence) -> Turn:
    """Inverse of ``turn_rows``: ``row`` holds the ``TURN_COLUMNS`` values in order."""
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

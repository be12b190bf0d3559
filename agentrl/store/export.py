"""Export a run's turns to Parquet (one row per turn, episode fields repeated)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from agentrl.store.sqlite import TurnStore

#: Parquet schema: token ids as list<int32>, logprobs/hidden as list<float32> (exact).
SCHEMA = pa.schema([
    ("run_id", pa.string()), ("episode_id", pa.int64()), ("group_id", pa.int64()), ("env_id", pa.string()),
    ("task_id", pa.string()), ("seed", pa.int64()), ("status", pa.string()), ("turn_id", pa.int64()),
    ("parent_turn_id", pa.int64()), ("t", pa.int64()), ("policy_version", pa.int64()),
    ("observation", pa.string()), ("anchor_obs", pa.string()), ("next_anchor_obs", pa.string()),
    ("action", pa.string()), ("action_valid", pa.bool_()), ("reward", pa.float64()),
    ("terminated", pa.bool_()), ("truncated", pa.bool_()), ("prompt_ids", pa.list_(pa.int32())),
    ("completion_ids", pa.list_(pa.int32())), ("completion_logprobs", pa.list_(pa.float32())),
    ("hidden", pa.list_(pa.float32())), ("info", pa.string()),
])


_COLS = ("t.turn_id, t.episode_id, t.group_id, e.env_id, e.task_id, e.seed, e.status, t.parent_turn_id, t.t, "
         "t.policy_version, t.observation, t.anchor_obs, t.next_anchor_obs, t.action, t.action_valid, t.reward, "
         "t.terminated, t.truncated, t.prompt_ids, t.completion_ids, t.completion_logprobs, t.hidden, t.info")


def _list_array(blobs: tuple, typ: pa.DataType) -> pa.Array:
    """4-byte little-endian blobs (``None``: a null list) → list<typ> without copying per row."""
    lengths = np.fromiter((0 if b is None else len(b) >> 2 for b in blobs), dtype=np.int32, count=len(blobs))
    offsets = np.zeros(len(blobs) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    dtype = "<i4" if typ == pa.int32() else "<f4"
    flat = np.frombuffer(b"".join(b for b in blobs if b is not None), dtype=dtype)
    mask = pa.array([b is None for b in blobs]) if None in blobs else None
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, type=typ), mask=mask)


def _batch(run_id: str, rows: list[tuple], info_text: dict[str, str]) -> pa.RecordBatch:
    (turn_id, episode_id, group_id, env_id, task_id, seed, status, parent, t, version, obs, anchor, nxt, action,
     valid, reward, term, trunc, prompt, completion, logprobs, hidden, info) = zip(*rows)
    for text in set(info) - info_text.keys():  # same text as json.dumps of the loaded dict
        info_text[text] = json.dumps(json.loads(text))
    data = {
        "run_id": [run_id] * len(rows), "episode_id": episode_id, "group_id": group_id, "env_id": env_id,
        "task_id": task_id, "seed": seed, "status": status, "turn_id": turn_id, "parent_turn_id": parent, "t": t,
        "policy_version": version, "observation": obs, "anchor_obs": anchor, "next_anchor_obs": nxt,
        "action": action, "action_valid": np.array(valid, dtype=bool), "reward": reward,
        "terminated": np.array(term, dtype=bool), "truncated": np.array(trunc, dtype=bool),
        "prompt_ids": _list_array(prompt, pa.int32()), "completion_ids": _list_array(completion, pa.int32()),
        "completion_logprobs": _list_array(logprobs, pa.float32()), "hidden": _list_array(hidden, pa.float32()),
        "info": [info_text[x] for x in info],
    }
    return pa.RecordBatch.from_pydict(data, schema=SCHEMA)


def export_parquet(store: "TurnStore", path: str | Path, run_id: str | None = None, *,
                   episodes_per_batch: int = 1000) -> int:
    """Write every turn of one run to a Parquet file (schema ``SCHEMA``), rows by episode id
    then ``t``; values are read from SQLite in bulk (no ``Turn`` objects).

    Args:
        store: an open ``TurnStore``.
        path: output ``.parquet`` file (its directory is created).
        run_id: the run; ``None`` picks the store's only run.
        episodes_per_batch: episodes read from SQLite per record batch (memory bound).
    Returns:
        the number of turn rows written (int).
    Raises:
        KeyError: unknown or ambiguous run.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    key, run = store._run_key(run_id)
    db = store._db()
    ids = [r[0] for r in db.execute("SELECT episode_id FROM episodes WHERE run_key = ? ORDER BY episode_id", (key,))]
    info_text: dict[str, str] = {}
    n = 0
    with pq.ParquetWriter(path, SCHEMA) as writer:
        for start in range(0, len(ids), episodes_per_batch):
            chunk = ids[start:start + episodes_per_batch]
            rows = db.execute(
                f"SELECT {_COLS} FROM turns t JOIN episodes e ON e.run_key = t.run_key AND e.episode_id = t.episode_id "
                "WHERE t.run_key = ? AND t.episode_id BETWEEN ? AND ? ORDER BY t.episode_id, t.t",
                (key, chunk[0], chunk[-1])).fetchall()
            if rows:
                rb = _batch(run, rows, info_text)
                writer.write_batch(rb)
                n += rb.num_rows
    return n

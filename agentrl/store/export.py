"""Export a run's turns to Parquet (one row per turn, episode fields repeated)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from agentrl.types import Episode

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


def _list_array(arrays: list[np.ndarray | None], dtype: np.dtype, typ: pa.DataType) -> pa.Array:
    lengths = np.array([0 if a is None else a.size for a in arrays], dtype=np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    flat = np.concatenate([a for a in arrays if a is not None] or [np.zeros(0, dtype)]).astype(dtype)
    mask = pa.array([a is None for a in arrays]) if any(a is None for a in arrays) else None
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, type=typ), mask=mask)


def _batch(episodes: list[Episode]) -> pa.RecordBatch:
    pairs = [(ep, tr) for ep in episodes for tr in ep.turns]
    col = lambda f: [f(ep, tr) for ep, tr in pairs]  # noqa: E731
    data = {
        "run_id": col(lambda e, t: t.run_id), "episode_id": col(lambda e, t: t.episode_id),
        "group_id": col(lambda e, t: t.group_id), "env_id": col(lambda e, t: e.env_id),
        "task_id": col(lambda e, t: e.task_id), "seed": col(lambda e, t: e.seed),
        "status": col(lambda e, t: e.status.value), "turn_id": col(lambda e, t: t.turn_id),
        "parent_turn_id": col(lambda e, t: t.parent_turn_id), "t": col(lambda e, t: t.t),
        "policy_version": col(lambda e, t: t.policy_version), "observation": col(lambda e, t: t.observation),
        "anchor_obs": col(lambda e, t: t.anchor_obs), "next_anchor_obs": col(lambda e, t: t.next_anchor_obs),
        "action": col(lambda e, t: t.action), "action_valid": col(lambda e, t: t.action_valid),
        "reward": col(lambda e, t: t.reward), "terminated": col(lambda e, t: t.terminated),
        "truncated": col(lambda e, t: t.truncated),
        "prompt_ids": _list_array(col(lambda e, t: t.prompt_ids), np.int32, pa.int32()),
        "completion_ids": _list_array(col(lambda e, t: t.completion_ids), np.int32, pa.int32()),
        "completion_logprobs": _list_array(col(lambda e, t: t.completion_logprobs), np.float32, pa.float32()),
        "hidden": _list_array(col(lambda e, t: t.hidden), np.float32, pa.float32()),
        "info": col(lambda e, t: json.dumps(t.info)),
    }
    return pa.RecordBatch.from_pydict(data, schema=SCHEMA)


def export_parquet(store: "TurnStore", path: str | Path, run_id: str | None = None, *,
                   episodes_per_batch: int = 1000) -> int:
    """Write every turn of one run to a Parquet file (schema ``SCHEMA``).

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
    ids = [r.episode_id for r in store.episodes(run_id)]
    run = store.episodes(run_id, ids[:1])[0].run_id if ids else run_id
    n = 0
    with pq.ParquetWriter(path, SCHEMA) as writer:
        for start in range(0, len(ids), episodes_per_batch):
            rb = _batch(store.load_episodes(run, ids[start:start + episodes_per_batch]))
            writer.write_batch(rb)
            n += rb.num_rows
    return n

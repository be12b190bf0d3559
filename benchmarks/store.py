"""Turn store speed: ingest rate (turns/s) with realistic token arrays next to a bare-sqlite3
floor, TurnTable build and Parquet export over 100k turns. Writes ``benchmarks/results/store.json``.

Usage: ``python benchmarks/store.py [--turns 100000] [--batch-episodes 64] [--repeats 3]``.

Each turn carries 300 prompt ids (int32), 20 completion ids (int32), 20 logprobs (float32)
and a ~150-character observation; episodes have 8 turns; one transaction per batch.

- ``store``: ``TurnStore.add_episodes`` of every batch (validation, id assignment, row
  building, insert, write-back).
- ``bare``: the floor — the same rows, built beforehand, inserted with plain
  ``executemany`` into a file with the same schema and pragmas (``schema.connect``), one
  ``BEGIN IMMEDIATE``/``COMMIT`` per batch. ``store_over_bare`` = store seconds / bare seconds.

The two alternate ``--repeats`` times on fresh files; medians and every run are reported.
Wall and CPU (``process_time``) seconds are both given: on a shared machine the CPU figures
are the better estimate of an idle machine; ``calibration_sum_1e7_s`` (before/after) and the
1-minute load average (before/after) say how contended the run was.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from agentrl.store import TurnStore, export_parquet
from agentrl.store.codec import turn_rows
from agentrl.store.schema import connect
from agentrl.store.sqlite import _INSERT_EPISODE, _INSERT_TURN
from agentrl.types import Episode, Turn

TURNS_PER_EPISODE = 8
PROMPT, COMPLETION = 300, 20
GOAL = 50_000


def make_batch(first_episode: int, n_episodes: int, rng: np.random.Generator) -> list[Episode]:
    """``n_episodes`` episodes of 8 turns with random tokens (ids -1: assigned by the store)."""
    eps = []
    for e in range(first_episode, first_episode + n_episodes):
        turns = []
        for t in range(TURNS_PER_EPISODE):
            room = int(rng.integers(20))
            turns.append(Turn(
                run_id="", episode_id=-1, group_id=e // 8, t=t,
                observation=f"You are in room {room}. " + "There is a table here with a lamp on it. " * 3,
                anchor_obs=f"room {room}", next_anchor_obs=f"room {int(rng.integers(20))}",
                action=f"go to room {int(rng.integers(20))}", action_valid=bool(rng.random() < 0.9),
                reward=float(t == TURNS_PER_EPISODE - 1), terminated=t == TURNS_PER_EPISODE - 1,
                prompt_ids=rng.integers(0, 49152, PROMPT, dtype=np.int32),
                completion_ids=rng.integers(0, 49152, COMPLETION, dtype=np.int32),
                completion_logprobs=-rng.random(COMPLETION, dtype=np.float32), info={"won": False},
            ))
        eps.append(Episode(episode_id=-1, group_id=e // 8, env_id="agentrl/Toy-v0", task_id=str(e // 8), seed=e // 8,
                           turns=turns))
    return eps


def _reset_ids(batches: list[list[Episode]]) -> None:
    """Undo the ids ``add_episodes`` wrote back, so the same objects can be stored again."""
    for batch in batches:
        for ep in batch:
            ep.episode_id, ep.run_id = -1, ""
            for tr in ep.turns:
                tr.turn_id, tr.episode_id, tr.run_id, tr.parent_turn_id = -1, -1, "", None


def _bare_rows(batches: list[list[Episode]], now: float) -> list[tuple[list, list]]:
    """Per batch, the (episode rows, turn rows) the store writes for run key 1, built up front."""
    out, eid, tid = [], 0, 0
    for batch in batches:
        ep_rows, t_rows = [], []
        for ep in batch:
            n = len(ep.turns)
            tids = list(range(tid, tid + n))
            ep_rows.append((1, eid, ep.group_id, ep.env_id, ep.task_id, ep.seed, "ok", "", n, ep.return_,
                            int(ep.success), now))
            t_rows.extend(turn_rows(ep.turns, 1, eid, tids, [None, *tids[:-1]]))
            eid, tid = eid + 1, tid + n
        out.append((ep_rows, t_rows))
    return out


def _timed(fn) -> tuple[float, float]:
    """(wall s, CPU s) of ``fn()``."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def ingest_bare(rows: list[tuple[list, list]], path: Path) -> tuple[float, float]:
    conn = connect(path)
    conn.execute("INSERT INTO runs (run_key, run_id, created_at) VALUES (1, 'bench', 0)")

    def run() -> None:
        for ep_rows, t_rows in rows:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(_INSERT_EPISODE, ep_rows)
            conn.executemany(_INSERT_TURN, t_rows)
            conn.execute("COMMIT")

    try:
        return _timed(run)
    finally:
        conn.close()


def ingest_store(batches: list[list[Episode]], path: Path) -> tuple[float, float]:
    _reset_ids(batches)
    with TurnStore(path) as store:
        return _timed(lambda: [store.add_episodes(batch, run_id="bench") for batch in batches])


def bench(n_turns: int, batch_episodes: int, repeats: int, workdir: Path) -> dict:
    rng = np.random.default_rng(0)
    n_batches = max(1, n_turns // (batch_episodes * TURNS_PER_EPISODE))
    batches = [make_batch(b * batch_episodes, batch_episodes, rng) for b in range(n_batches)]
    total = n_batches * batch_episodes * TURNS_PER_EPISODE
    rows = _bare_rows(batches, time.time())
    runs: dict[str, list[tuple[float, float]]] = {"store": [], "bare": []}
    for r in range(repeats):  # alternate, each on a fresh file
        runs["bare"].append(ingest_bare(rows, workdir / f"bare{r}.sqlite"))
        runs["store"].append(ingest_store(batches, workdir / f"store{r}.sqlite"))
    del rows
    path = workdir / f"store{repeats - 1}.sqlite"
    with TurnStore(path) as store:
        tables = []
        table_s, table_cpu_s = _timed(lambda: tables.append(store.table("bench")))
        assert len(tables[0]) == total
        ids = [r.episode_id for r in store.episodes("bench")]
        read_s, _ = _timed(lambda: [store.turns(eid, "bench") for eid in ids[:200]])
        export_s, export_cpu_s = _timed(lambda: export_parquet(store, workdir / "bench.parquet"))
    wall = {k: statistics.median(w for w, _ in v) for k, v in runs.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in runs.items()}
    return {
        "turns": total,
        "batch_turns": batch_episodes * TURNS_PER_EPISODE,
        "prompt_ids_per_turn": PROMPT,
        "completion_ids_per_turn": COMPLETION,
        "repeats": repeats,
        "ingest_s": round(wall["store"], 3),
        "ingest_turns_per_s": round(total / wall["store"]),
        "ingest_cpu_s": round(cpu["store"], 3),
        "ingest_turns_per_cpu_s": round(total / cpu["store"]),
        "ingest_best_turns_per_s": round(total / min(w for w, _ in runs["store"])),
        "ingest_goal_turns_per_s": GOAL,
        "bare_sqlite_turns_per_s": round(total / wall["bare"]),
        "bare_sqlite_turns_per_cpu_s": round(total / cpu["bare"]),
        "store_over_bare_wall": round(wall["store"] / wall["bare"], 2),
        "store_over_bare_cpu": round(cpu["store"] / cpu["bare"], 2),
        "runs_wall_cpu_s": {k: [[round(w, 3), round(c, 3)] for w, c in v] for k, v in runs.items()},
        "table_build_s": round(table_s, 3),
        "table_build_cpu_s": round(table_cpu_s, 3),
        "table_turns_per_s": round(total / table_s),
        "read_one_episode_ms": round(read_s / min(200, len(ids)) * 1e3, 3),
        "export_parquet_s": round(export_s, 3),
        "export_parquet_cpu_s": round(export_cpu_s, 3),
        "export_rows": total,
        "file_mib": round(path.stat().st_size / 2**20, 1),
    }


def _calibrate() -> float:
    t0 = time.perf_counter()
    sum(range(10_000_000))  # ~0.15-0.2 s on an idle modern core; higher = a contended machine
    return round(time.perf_counter() - t0, 3)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=100_000)
    p.add_argument("--batch-episodes", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "store.json"))
    args = p.parse_args()
    load_before, calib_before = round(os.getloadavg()[0], 2), _calibrate()
    with tempfile.TemporaryDirectory() as d:
        result = bench(args.turns, args.batch_episodes, args.repeats, Path(d))
    result["machine"] = {"python": platform.python_version(), "platform": platform.platform(),
                         "processor": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                         "load_avg_1min": [load_before, round(os.getloadavg()[0], 2)],
                         "calibration_sum_1e7_s": [calib_before, _calibrate()]}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

"""Turn store speed: ingest rate (turns/s) with realistic token arrays, and TurnTable build
time over 100k turns. Writes ``benchmarks/results/store.json``.

Usage: ``python benchmarks/store.py [--turns 100000] [--batch-episodes 64]``.

Each turn carries 300 prompt ids (int32), 20 completion ids (int32), 20 logprobs (float32)
and a ~150-character observation; episodes have 8 turns; one transaction per batch. Wall
and CPU (``process_time``) seconds are both reported: on a shared machine the CPU figures
are the better estimate of an idle machine; ``calibration_sum_1e7_s`` and the load average
say how contended the run was.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from agentrl.store import TurnStore, export_parquet
from agentrl.types import Episode, Turn

TURNS_PER_EPISODE = 8
PROMPT, COMPLETION = 300, 20


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


def bench(n_turns: int, batch_episodes: int, workdir: Path) -> dict:
    rng = np.random.default_rng(0)
    n_batches = max(1, n_turns // (batch_episodes * TURNS_PER_EPISODE))
    batches = [make_batch(b * batch_episodes, batch_episodes, rng) for b in range(n_batches)]
    total = n_batches * batch_episodes * TURNS_PER_EPISODE
    path = workdir / "bench.sqlite"
    with TurnStore(path) as store:
        t0, c0 = time.perf_counter(), time.process_time()
        for batch in batches:
            store.add_episodes(batch, run_id="bench")
        ingest_s, ingest_cpu_s = time.perf_counter() - t0, time.process_time() - c0
        t0, c0 = time.perf_counter(), time.process_time()
        table = store.table("bench")
        table_s, table_cpu_s = time.perf_counter() - t0, time.process_time() - c0
        assert len(table) == total
        ids = [r.episode_id for r in store.episodes("bench")]
        t0 = time.perf_counter()
        for eid in ids[:200]:
            store.turns(eid, "bench")
        turns_read_s = (time.perf_counter() - t0) / min(200, len(ids))
        t0 = time.perf_counter()
        n_rows = export_parquet(store, workdir / "bench.parquet")
        export_s = time.perf_counter() - t0
    return {
        "turns": total,
        "batch_turns": batch_episodes * TURNS_PER_EPISODE,
        "prompt_ids_per_turn": PROMPT,
        "completion_ids_per_turn": COMPLETION,
        "ingest_s": round(ingest_s, 3),
        "ingest_turns_per_s": round(total / ingest_s),
        "ingest_cpu_s": round(ingest_cpu_s, 3),
        "ingest_turns_per_cpu_s": round(total / ingest_cpu_s),
        "ingest_goal_turns_per_s": 50_000,
        "table_build_s": round(table_s, 3),
        "table_build_cpu_s": round(table_cpu_s, 3),
        "table_turns_per_s": round(total / table_s),
        "read_one_episode_ms": round(turns_read_s * 1e3, 3),
        "export_parquet_s": round(export_s, 3),
        "export_rows": n_rows,
        "file_mib": round(path.stat().st_size / 2**20, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=100_000)
    p.add_argument("--batch-episodes", type=int, default=64)
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "store.json"))
    args = p.parse_args()
    t0 = time.perf_counter()
    sum(range(10_000_000))  # ~0.15-0.2 s on an idle modern core; higher = a contended machine
    calibration_s = round(time.perf_counter() - t0, 3)
    with tempfile.TemporaryDirectory() as d:
        result = bench(args.turns, args.batch_episodes, Path(d))
    result["machine"] = {"python": platform.python_version(), "platform": platform.platform(),
                         "processor": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                         "load_avg_1min": round(os.getloadavg()[0], 2),
                         "calibration_sum_1e7_s": calibration_s}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

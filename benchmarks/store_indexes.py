"""The viewer's indexes in the store schema (issue 20 item 12): ingest cost and page times,
before and after, side by side in one run. Writes ``benchmarks/results/store_indexes.json``.

Usage: ``python benchmarks/store_indexes.py [--episodes 4096] [--repeats 9] [--view-turns 1000000]
[--reps 9] [--out benchmarks/results/store_indexes.json]``.

1. **Ingest** (``TurnStore.add_episodes``, turns of 300 prompt + 20 completion ids as in
   ``store.py``, 64 episodes per transaction), CPU seconds (``process_time``), the schemas
   alternating ``--repeats`` times on fresh files:

   - ``before``: the schema before issue 20 (``turns_by_episode`` only), no viewer run;
   - ``before_viewed``: the same store after an old viewer had added its four indexes
     (episodes by group, turns by group, turns by policy version, advantages by iteration) —
     every later ingest paid for them;
   - ``after``: the current schema (three viewer indexes; the group page reaches a group's
     turns through its episodes, so there is no turns-by-group index).

2. **Viewer** on a synthetic ``--view-turns`` store (``viewer.build_store``): page medians
   (ms, ``--reps`` requests) of the current schema and of the same store without the viewer
   indexes (an older store, served read-only: the viewer no longer adds them), the group
   page's turn query old (turns-by-group index) vs new (through episodes) on the same file,
   the one-time index build (``agentrl store index``), and ``PRAGMA quick_check`` (run at
   every open since item 5) on this store and on the ingest store.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from store import _reset_ids, make_batch  # noqa: E402
from viewer import _time, build_store, pages  # noqa: E402

from agentrl.store import TurnStore  # noqa: E402
from agentrl.store.schema import VIEW_INDEXES, connect  # noqa: E402

OLD_TURNS_BY_GROUP = "CREATE INDEX view_turns_by_group ON turns (run_key, group_id)"
OLD_GROUP_SQL = ("SELECT turn_id, episode_id, t, parent_turn_id, action, action_valid, reward, anchor_obs "
                 "FROM turns INDEXED BY view_turns_by_group WHERE run_key = ? AND group_id = ? LIMIT 5001")
NEW_GROUP_SQL = ("SELECT turn_id, episode_id, t, parent_turn_id, action, action_valid, reward, anchor_obs "
                 "FROM turns INDEXED BY turns_by_episode WHERE run_key = ? AND episode_id IN "
                 "(SELECT episode_id FROM episodes INDEXED BY view_episodes_by_group WHERE run_key = ? AND group_id = ?) "
                 "LIMIT 5001")  # agentrl.view.turns.group_turns


def _schema(conn: sqlite3.Connection, variant: str) -> None:
    """Turn a fresh current-schema store into ``variant``'s index set."""
    if variant in ("before", "before_viewed"):
        for name in VIEW_INDEXES:
            conn.execute(f"DROP INDEX {name}")
    if variant == "before_viewed":
        conn.execute("CREATE INDEX view_episodes_by_group ON episodes (run_key, group_id, episode_id)")
        conn.execute(OLD_TURNS_BY_GROUP)
        conn.execute("CREATE INDEX view_turns_by_version ON turns (run_key, policy_version, episode_id)")
        conn.execute("CREATE INDEX view_advantages_by_iteration ON advantages (run_key, iteration, estimator, value)")


def _quick_check_s(path: Path, reps: int = 3) -> float:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        assert conn.execute("PRAGMA quick_check").fetchall() == [("ok",)]
        times.append(time.perf_counter() - t0)
    conn.close()
    return min(times)


def ingest(episodes: int, repeats: int, tmp: Path) -> dict:
    rng = np.random.default_rng(0)
    batches = [make_batch(b, 64, rng) for b in range(0, episodes, 64)]
    n_turns = sum(len(e.turns) for b in batches for e in b)
    variants = ("before", "before_viewed", "after")
    cpu: dict[str, list[float]] = {v: [] for v in variants}
    wall: dict[str, list[float]] = {v: [] for v in variants}
    qc = {}
    for rep in range(repeats):
        for v in variants[rep % 3:] + variants[:rep % 3]:  # rotate the order: no variant always goes first
            path = tmp / f"ingest-{v}.sqlite"
            for f in tmp.glob(f"ingest-{v}.sqlite*"):
                f.unlink()
            store = TurnStore(path)
            _schema(store._conn, v)
            _reset_ids(batches)
            c0, w0 = time.process_time(), time.perf_counter()
            for b in batches:
                store.add_episodes(b, run_id="r")
            store.close()
            cpu[v].append(time.process_time() - c0)
            wall[v].append(time.perf_counter() - w0)
            if rep == 0:
                qc[v] = {"quick_check_s": round(_quick_check_s(path), 4), "file_mib": round(path.stat().st_size / 2**20, 1)}
    med = {v: statistics.median(cpu[v]) for v in variants}
    best = {v: min(cpu[v]) for v in variants}  # on a shared machine the best run is the least disturbed one
    return {
        "turns": n_turns, "repeats": repeats,
        "cpu_s_median": {v: round(med[v], 3) for v in variants},
        "cpu_s_min": {v: round(best[v], 3) for v in variants},
        "cpu_ratio_vs_before_min": {v: round(best[v] / best["before"], 3) for v in variants},
        "wall_s_median": {v: round(statistics.median(wall[v]), 3) for v in variants},
        "turns_per_cpu_s": {v: round(n_turns / med[v]) for v in variants},
        "cpu_ratio_vs_before": {v: round(med[v] / med["before"], 3) for v in variants},
        "cpu_s_all": {v: [round(x, 3) for x in cpu[v]] for v in variants},
        "quick_check": qc,
    }


def viewer(n_turns: int, reps: int, tmp: Path) -> dict:
    from agentrl.view import ViewerOptions, create_app

    path = tmp / "view-after.sqlite"
    shape = build_store(path, n_turns, 50)
    old = tmp / "view-before.sqlite"
    shutil.copyfile(path, old)  # closed store: no WAL, the main file is everything
    conn = sqlite3.connect(old)
    for name in VIEW_INDEXES:
        conn.execute(f"DROP INDEX {name}")
    conn.execute("VACUUM")
    conn.close()
    urls = pages(shape)
    before_digest = old.read_bytes()
    t_after = asyncio.run(_time(create_app(ViewerOptions(store=path)), urls, reps))
    t_before = asyncio.run(_time(create_app(ViewerOptions(store=old)), urls, max(1, reps // 3)))
    assert old.read_bytes() == before_digest, "the viewer wrote the store"
    build = tmp / "view-build.sqlite"
    shutil.copyfile(old, build)
    t0 = time.perf_counter()
    connect(build, check=False).close()  # what `agentrl store index` does
    index_s = time.perf_counter() - t0

    # the group page's turn query, old index vs new path, on one file holding both
    conn = sqlite3.connect(path)
    conn.execute(OLD_TURNS_BY_GROUP)
    conn.close()
    ro = connect(path, readonly=True, check=False)
    g = shape["groups"] // 2
    q_old, q_new = [], []
    for _ in range(max(reps, 20)):
        t0 = time.perf_counter()
        old_rows = ro.execute(OLD_GROUP_SQL, (1, g)).fetchall()
        q_old.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        new_rows = ro.execute(NEW_GROUP_SQL, (1, 1, g)).fetchall()
        q_new.append((time.perf_counter() - t0) * 1e3)
    assert sorted(old_rows) == sorted(new_rows)
    ro.close()
    return {
        "store": shape, "reps": reps,
        "pages_median_ms": {k: {"after": t_after[k]["median_ms"], "before_no_indexes": t_before[k]["median_ms"],
                                "ratio_before_over_after": round(t_before[k]["median_ms"] / t_after[k]["median_ms"], 2)}
                            for k in urls},
        "viewer_wrote_the_old_store": False,
        "index_build_s": round(index_s, 2),
        "group_turns_query_ms": {"old_turns_by_group": round(statistics.median(q_old), 3),
                                 "new_through_episodes": round(statistics.median(q_new), 3)},
        "quick_check_s": round(_quick_check_s(old), 4), "file_mib": round(old.stat().st_size / 2**20, 1),
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=4096, help="ingest: episodes of 8 turns (default 4096)")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--view-turns", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--out", default="benchmarks/results/store_indexes.json")
    args = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as d:
        result = {"benchmark": "store_indexes", "ingest": ingest(args.episodes, args.repeats, Path(d)),
                  "viewer": viewer(args.view_turns, args.reps, Path(d))}
    result["load_avg_1m"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    result["machine"] = {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version,
                         "cpus": os.cpu_count(), "platform": platform.platform()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()

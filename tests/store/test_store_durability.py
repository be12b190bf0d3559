"""Turn store under process death and concurrent writers (DESIGN.md invariant 4)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap

from agentrl.store import TurnStore

BATCH = 50
TURNS = 4

# Writes batches of BATCH episodes (TURNS turns each, 300 prompt + 20 completion tokens)
# to run argv[2] and prints the number of committed batches after each commit.
WRITER = textwrap.dedent(f"""
    import sys
    import time
    import numpy as np
    from agentrl.store import TurnStore
    from agentrl.types import Episode, Turn

    path, run, tag, n_batches = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    hang_at = int(sys.argv[5]) if len(sys.argv) > 5 else -1
    insert = TurnStore._insert_plan

    def insert_then_hang(self, *args):  # rows inserted, transaction not committed yet
        insert(self, *args)
        if b == hang_at:
            print("inside", flush=True)
            time.sleep(120)

    TurnStore._insert_plan = insert_then_hang
    store = TurnStore(path)
    ids = np.arange(300, dtype=np.int32)
    b = 0
    while n_batches < 0 or b < n_batches:
        eps = [Episode(-1, 0, "x/Y-v0", tag, 0, turns=[
                   Turn("", -1, 0, t, "obs", "anchor", "act", True, 1.0, prompt_ids=ids,
                        completion_ids=ids[:20], completion_logprobs=np.zeros(20, np.float32))
                   for t in range({TURNS})]) for _ in range({BATCH})]
        store.add_episodes(eps, run_id=run)
        b += 1
        print(b, flush=True)
""")


def _writer(path, run: str, tag: str, n_batches: int, hang_at: int = -1) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(path), run, tag, str(n_batches), str(hang_at)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_sigkill_mid_batch_loses_nothing_committed(tmp_path):
    path = tmp_path / "s.sqlite"
    proc = _writer(path, "r", "w", -1, hang_at=5)  # 5 batches commit, the 6th hangs inside its transaction
    lines = []
    try:
        while not lines or lines[-1] != "inside":
            line = proc.stdout.readline()
            assert line, f"writer exited early: {proc.stderr.read()}"
            lines.append(line.strip())
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert lines == ["1", "2", "3", "4", "5", "inside"]
    assert proc.returncode == -signal.SIGKILL
    committed = 5
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    with TurnStore(path) as store:
        recs = store.episodes("r")
        table = store.table("r")
        # every committed batch is there; the batch killed inside its transaction is not
        assert len(recs) == committed * BATCH
        assert all(r.n_turns == TURNS for r in recs)
        assert len(table) == len(recs) * TURNS
        assert [r.episode_id for r in recs] == list(range(len(recs)))
        # the store is still writable after the crash
        first = store.load_episodes("r", [0])[0]
        first.episode_id = -1
        for tr in first.turns:
            tr.turn_id, tr.parent_turn_id = -1, None
        store.add_episodes([first], run_id="r")
        assert first.episode_id == len(recs)


def test_two_processes_write_one_store_concurrently(tmp_path):
    path = tmp_path / "s.sqlite"
    TurnStore(path).close()
    n_batches = 6
    procs = [_writer(path, "shared", tag, n_batches) for tag in ("a", "b")]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert out.split() == [str(i) for i in range(1, n_batches + 1)]
    with TurnStore(path, readonly=True) as store:
        recs = store.episodes("shared")
        table = store.table("shared")
    n_eps = 2 * n_batches * BATCH
    assert len(recs) == n_eps
    assert sum(r.task_id == "a" for r in recs) == n_batches * BATCH
    assert sorted(table.turn_id.tolist()) == list(range(n_eps * TURNS))  # unique, no gaps
    # every non-first turn's parent is the previous turn of the same episode
    has_parent = table.t > 0
    assert (table.parent[~has_parent] == -1).all()
    par = table.parent[has_parent]
    assert (table.episode[par] == table.episode[has_parent]).all()
    assert (table.t[par] == table.t[has_parent] - 1).all()

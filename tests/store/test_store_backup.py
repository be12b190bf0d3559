"""Turn store copies: a closing writer checkpoints its WAL into the main file, and `agentrl store
backup` copies a live store (the main file alone lags behind while the WAL holds the rest)."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from agentrl.cli import main
from agentrl.store import StoreDamagedError, TurnStore, backup
from agentrl.types import Episode, Turn


def _episodes(n: int) -> list[Episode]:
    ids = np.arange(64, dtype=np.int32)
    return [Episode(episode_id=-1, group_id=g, env_id="agentrl/Toy-v0", task_id=f"t{g}", seed=g,
                    turns=[Turn(run_id="", episode_id=-1, group_id=g, t=t, observation="room " * 40, anchor_obs="a",
                                action="go", action_valid=True, reward=0.0, prompt_ids=ids) for t in range(4)])
            for g in range(n)]


def _count(path: Path) -> int:
    with TurnStore(path, readonly=True) as store:
        return len(store.episodes("r"))


def test_closing_writer_checkpoints_the_wal_while_a_reader_is_open(tmp_path):
    path = tmp_path / "s.sqlite"
    with TurnStore(path) as store:
        store.add_episodes(_episodes(1), run_id="r")
    with closing(sqlite3.connect(path)) as reader:  # e.g. the viewer: SQLite keeps the WAL while it is open
        reader.execute("SELECT count(*) FROM episodes").fetchone()
        with TurnStore(path) as store:
            for _ in range(3):
                store.add_episodes(_episodes(100), run_id="r")
        wal = path.with_name(path.name + "-wal")
        assert not wal.exists() or wal.stat().st_size == 0  # everything is in the main file now
        copy = tmp_path / "copy.sqlite"
        shutil.copyfile(path, copy)  # the main file only, as a careless `cp` does
    assert _count(copy) == 301


def test_backup_copies_a_live_store_with_its_wal(tmp_path, capsys):
    src, dst = tmp_path / "live.sqlite", tmp_path / "sub" / "backup.sqlite"
    with TurnStore(src) as store:
        store.add_episodes(_episodes(1), run_id="r")
    with TurnStore(src) as writer, closing(sqlite3.connect(src)) as reader:
        reader.execute("SELECT 1 FROM episodes").fetchone()
        for _ in range(3):
            writer.add_episodes(_episodes(100), run_id="r")  # committed, still in the WAL
        lagging = tmp_path / "cp.sqlite"
        shutil.copyfile(src, lagging)
        assert _count(lagging) < 301  # what a plain copy of the main file gets
        assert main(["store", "backup", str(src), str(dst)]) == 0
        out = capsys.readouterr().out
        assert "301 episodes" in out and "1204 turns" in out and str(dst) in out
        writer.add_episodes(_episodes(1), run_id="r")  # the live store stays writable
    assert sorted(p.name for p in dst.parent.iterdir()) == ["backup.sqlite"]  # one self-contained file
    assert _count(dst) == 301 and _count(src) == 302
    with TurnStore(dst) as copy:  # the backup is a normal, appendable store
        copy.add_episodes(_episodes(1), run_id="r")


def test_backup_refuses_to_overwrite_or_copy_damage(tmp_path, capsys):
    src, dst = tmp_path / "s.sqlite", tmp_path / "d.sqlite"
    with TurnStore(src) as store:
        store.add_episodes(_episodes(200), run_id="r")
    dst.write_text("keep me")
    assert main(["store", "backup", str(src), str(dst)]) == 2
    err = capsys.readouterr().err
    assert "exists" in err and str(dst) in err
    assert dst.read_text() == "keep me"
    with pytest.raises(FileNotFoundError, match="no turn store"):
        backup(tmp_path / "missing.sqlite", tmp_path / "x.sqlite")
    with closing(sqlite3.connect(src)) as raw:
        page_size = raw.execute("PRAGMA page_size").fetchone()[0]
        root = raw.execute("SELECT rootpage FROM sqlite_master WHERE name = 'turns'").fetchone()[0]
    with open(src, "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xab" * 64)
    with pytest.raises(StoreDamagedError):
        backup(src, tmp_path / "x.sqlite")
    assert not (tmp_path / "x.sqlite").exists() and not list(tmp_path.glob(".x.sqlite*"))

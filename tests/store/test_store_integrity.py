"""Turn store: a damaged file is refused (nothing appended, one-line error naming the fix); a valid
store on a read-only file system opens read-only and refuses writes saying so."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from agentrl.cli import main
from agentrl.store import StoreDamagedError, TurnStore
from agentrl.types import Episode, Turn

REPO = Path(__file__).resolve().parents[2]


def _episodes(n: int, group0: int = 0) -> list[Episode]:
    ids = np.arange(64, dtype=np.int32)
    return [Episode(episode_id=-1, group_id=g, env_id="agentrl/Toy-v0", task_id=f"t{g}", seed=g,
                    turns=[Turn(run_id="", episode_id=-1, group_id=g, t=t, observation="room " * 40, anchor_obs="a",
                                action="go", action_valid=True, reward=0.0, prompt_ids=ids)
                           for t in range(4)])
            for g in range(group0, group0 + n)]


def _store(path: Path, n: int = 400) -> Path:
    with TurnStore(path) as store:
        for b in range(0, n, 100):
            store.add_episodes(_episodes(min(100, n - b), b), run_id="r")
    return path


def _damage(path: Path) -> None:
    """Overwrite the root pages of the episodes and turns b-trees (their headers: page type, cell count)."""
    with sqlite3.connect(path) as raw:
        page_size = raw.execute("PRAGMA page_size").fetchone()[0]
        roots = [r[0] for r in raw.execute("SELECT rootpage FROM sqlite_master WHERE name IN ('episodes', 'turns')")]
    with open(path, "r+b") as f:
        for root in roots:
            f.seek((root - 1) * page_size)
            f.write(b"\xab" * 64)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_damaged_store_is_refused_for_writing_and_reading(tmp_path):
    path = _damage_copy(tmp_path)
    before = _digest(path)
    for readonly in (False, True):
        with pytest.raises(StoreDamagedError) as exc:
            TurnStore(path, readonly=readonly)
        msg = str(exc.value)
        assert "\n" not in msg and str(path) in msg and "damaged" in msg
        assert ".recover" in msg and "backup" in msg
    assert _digest(path) == before  # nothing was written
    assert isinstance(exc.value, ValueError)  # the CLI prints it as one red line, exit 2


def _damage_copy(tmp_path: Path) -> Path:
    path = _store(tmp_path / "s.sqlite")
    _damage(path)
    return path


def test_cli_refuses_a_damaged_store_in_one_line(tmp_path, capsys):
    path = _damage_copy(tmp_path)
    before = _digest(path)
    assert main(["rollout", "agentrl/Toy-v0", "--store", str(path), "--policy", "random", "--episodes", "2",
                 "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert "damaged" in err and ".recover" in err and "Traceback" not in err
    assert _digest(path) == before
    for argv in (["replay", str(path)], ["replay", str(path), "--episode", "3"]):
        assert main(argv) == 2
        captured = capsys.readouterr()
        assert "damaged" in captured.err and "Traceback" not in captured.err


def test_replay_reports_damage_found_after_the_open_check(tmp_path, capsys, monkeypatch):
    import agentrl.store.schema as schema

    path = _damage_copy(tmp_path)
    monkeypatch.setattr(schema, "check_integrity", lambda *a, **k: None)  # damage the open-time check missed
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert "damaged" in err and "malformed" in err and "Traceback" not in err


def test_recover_hint_works(tmp_path):
    """The fix the message names gives a store that opens (what survived the damage)."""
    if shutil.which("sqlite3") is None:
        pytest.skip("no sqlite3 command-line shell")
    path = _damage_copy(tmp_path)
    out = tmp_path / "recovered.sqlite"
    probe = subprocess.run(["sqlite3", ":memory:", "SELECT count(*) FROM sqlite_dbpage"], capture_output=True, text=True)
    if probe.returncode != 0:  # e.g. Debian's shell: built without the dbpage table that .recover reads
        pytest.skip(f"this sqlite3 shell cannot .recover ({probe.stderr.strip()})")
    rec = subprocess.run(["sqlite3", str(path), ".recover"], capture_output=True)
    assert rec.returncode == 0, rec.stderr
    dump = rec.stdout
    subprocess.run(["sqlite3", str(out)], input=dump, check=True)
    with TurnStore(out) as store:
        assert store.runs() == ["r"]


def test_a_valid_store_passes_the_check_and_stays_appendable(tmp_path):
    path = _store(tmp_path / "s.sqlite", n=100)
    with TurnStore(path) as store:
        store.add_episodes(_episodes(1, 500), run_id="r")
        assert len(store.episodes("r")) == 101


# -- read-only file system ---------------------------------------------------------------------

PROBE = """
import sys
from agentrl.store import StorePathError, TurnStore
path = sys.argv[1]
with TurnStore(path, readonly=True) as store:
    print("episodes", len(store.episodes("r")))
try:
    TurnStore(path)
except StorePathError as exc:
    print("refused", exc)
"""


def _in_read_only_mount(folder: Path, argv: list[str]) -> subprocess.CompletedProcess:
    """Run ``argv`` with ``folder`` bind-mounted read-only over itself (a private mount namespace:
    root cannot write it either), or under chmod when not root."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if os.geteuid() != 0:
        folder.chmod(0o555)
        for f in folder.iterdir():
            f.chmod(0o444)
        return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO)
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to mount a read-only file system")
    q = subprocess.list2cmdline
    script = f"mount --bind {folder} {folder} && mount -o remount,ro,bind {folder} && exec {q(argv)}"
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, env=env, cwd=REPO)
    if "mount" in proc.stderr and proc.returncode != 0 and "agentrl" not in proc.stderr:
        pytest.skip(f"cannot mount read-only here: {proc.stderr.strip()}")
    return proc


def test_valid_store_on_a_read_only_file_system_opens_read_only(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    path = _store(folder / "s.sqlite", n=100)
    assert sorted(p.name for p in folder.iterdir()) == ["s.sqlite"]  # no -wal / -shm left behind
    proc = _in_read_only_mount(folder, [sys.executable, "-c", PROBE, str(path)])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "episodes 100"
    assert lines[1].startswith("refused") and "read-only" in lines[1] and "not an agentrl turn store" not in proc.stdout
    assert "agentrl store backup" in lines[1]


def test_cli_on_a_read_only_file_system(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    path = _store(folder / "s.sqlite", n=10)
    replay = _in_read_only_mount(folder, [sys.executable, "-m", "agentrl", "replay", str(path)])
    assert replay.returncode == 0, replay.stderr
    assert "run r: 10 episodes" in replay.stdout and "read-only" in replay.stderr
    rollout = _in_read_only_mount(folder, [sys.executable, "-m", "agentrl", "rollout", "agentrl/Toy-v0", "--store",
                                           str(path), "--policy", "random", "--episodes", "2", "--workers", "1"])
    assert rollout.returncode == 2 and "read-only" in rollout.stderr and "Traceback" not in rollout.stderr

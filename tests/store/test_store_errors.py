"""Turn store: unusable paths, foreign files and schema versions give actionable errors."""

from __future__ import annotations

import sqlite3

import pytest

from agentrl.store import SchemaVersionError, StoreError, StorePathError, TurnStore
from agentrl.types import SCHEMA_VERSION, Episode, Turn


def test_unwritable_path_names_path_and_fix(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    bad = blocker / "sub" / "store.sqlite"  # parent is a regular file: cannot be created (even as root)
    with pytest.raises(StorePathError) as exc:
        TurnStore(bad)
    assert str(bad) in str(exc.value) and "writable directory" in str(exc.value)
    assert isinstance(exc.value, PermissionError)  # the CLI prints it as one red line


def test_directory_as_store_path(tmp_path):
    with pytest.raises(StorePathError, match="is a directory"):
        TurnStore(tmp_path)


def test_readonly_open_of_missing_store(tmp_path):
    missing = tmp_path / "nope.sqlite"
    with pytest.raises(FileNotFoundError, match="agentrl rollout"):
        TurnStore(missing, readonly=True)
    assert not missing.exists()


def test_read_only_store_refuses_writes(tmp_path):
    TurnStore(tmp_path / "s.sqlite").close()
    with TurnStore(tmp_path / "s.sqlite", readonly=True) as store:
        with pytest.raises(StoreError, match="read-only"):
            store.add_episodes([Episode(0, 0, "x", "t", 0)], run_id="r")


def test_schema_version_mismatch_is_refused_and_file_untouched(tmp_path):
    path = tmp_path / "s.sqlite"
    with TurnStore(path) as store:
        store.add_episodes([Episode(0, 0, "x", "t", 0, turns=[Turn("", 0, 0, 0, "o", "a", "act", True, 1.0)])],
                           run_id="r")
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
        raw.execute("DROP TABLE metrics")
    with pytest.raises(SchemaVersionError) as exc:
        TurnStore(path)
    msg = str(exc.value)
    assert "999" in msg and f"version {SCHEMA_VERSION}" in msg and str(path) in msg
    with pytest.raises(SchemaVersionError):
        TurnStore(path, readonly=True)
    with sqlite3.connect(path) as raw:  # nothing was created or changed in the foreign file
        names = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "metrics" not in names
        assert raw.execute("SELECT count(*) FROM turns").fetchone()[0] == 1


def test_foreign_files_are_refused(tmp_path):
    text = tmp_path / "notes.sqlite"
    text.write_text("hello, this is not SQLite" * 100)
    with pytest.raises(StoreError, match="not an agentrl turn store"):
        TurnStore(text)
    assert text.read_text().startswith("hello")
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as raw:
        raw.execute("CREATE TABLE users (name TEXT)")
    with pytest.raises(StoreError, match="not an agentrl turn store"):
        TurnStore(other)

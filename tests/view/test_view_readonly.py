"""The viewer never writes the store: the indexes its pages use are in the store schema from
creation, and a store written before them (no viewer indexes) is served as it is, only slower."""

from __future__ import annotations

import hashlib
import re
import sqlite3
from contextlib import closing

import pytest

pytest.importorskip("fastapi", reason="the viewer needs the view extra: pip install 'agentrl[view]'")
from fastapi.testclient import TestClient  # noqa: E402

from agentrl.cli import main  # noqa: E402
from agentrl.store import TurnStore  # noqa: E402
from agentrl.store.schema import VIEW_INDEXES  # noqa: E402
from agentrl.view import ViewerOptions, create_app  # noqa: E402
from view_fixtures import build_hand_store  # noqa: E402

URLS = ("/", "/run?run=hand", "/iteration?run=hand&iteration=1", "/group?run=hand&group=1",
        "/group?run=hand&group=0&policy_version=1", "/episode?run=hand&episode=2",
        "/run?run=hand&policy_version=1&iteration=1")


def _indexes(path) -> set[str]:
    with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as raw:
        return {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")}


def _drop_view_indexes(path) -> None:
    """Make ``path`` look like a store written before the viewer's indexes joined the schema."""
    with closing(sqlite3.connect(path)) as raw:
        for name in _indexes(path) - {"turns_by_episode"}:
            raw.execute(f"DROP INDEX {name}")


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _pages(path) -> dict[str, str]:
    client = TestClient(create_app(ViewerOptions(store=path)))
    out = {}
    for url in URLS:
        r = client.get(url)
        assert r.status_code == 200, (url, r.text[-300:])
        out[url] = r.text
    return out


def test_new_stores_have_the_viewer_indexes(tmp_path):
    TurnStore(tmp_path / "s.sqlite").close()
    assert _indexes(tmp_path / "s.sqlite") == {"turns_by_episode", *VIEW_INDEXES}


def test_viewer_never_writes_and_old_stores_show_the_same_pages(tmp_path):
    new = build_hand_store(tmp_path / "new.sqlite").path
    old = build_hand_store(tmp_path / "old.sqlite").path
    _drop_view_indexes(old)
    before = {p: (_digest(p), _indexes(p)) for p in (new, old)}
    pages_new, pages_old = _pages(new), _pages(old)
    assert {p: (_digest(p), _indexes(p)) for p in (new, old)} == before  # not a byte written, no index added
    for url in URLS:  # without the indexes: the same page (but its warning), only slower on large stores
        body_old = re.sub(r'<p class="warn">.*?</p>', "", pages_old[url].split("</header>")[-1])
        assert body_old == pages_new[url].split("</header>")[-1], url
    app = create_app(ViewerOptions(store=old))
    (warning,) = app.state.warnings
    assert "agentrl store index" in warning and "slower" in warning
    assert create_app(ViewerOptions(store=new)).state.warnings == []


def test_store_index_adds_the_missing_indexes(tmp_path, capsys):
    old = build_hand_store(tmp_path / "old.sqlite").path
    _drop_view_indexes(old)
    with TurnStore(old, readonly=True) as store:
        rows = [(t.turn_id, t.observation, t.prompt_ids.tolist()) for e in store.load_episodes("hand") for t in e.turns]
    assert main(["store", "index", str(old)]) == 0
    assert "added 3 indexes" in capsys.readouterr().out
    assert _indexes(old) == {"turns_by_episode", *VIEW_INDEXES}
    with TurnStore(old, readonly=True) as store:
        assert [(t.turn_id, t.observation, t.prompt_ids.tolist()) for e in store.load_episodes("hand")
                for t in e.turns] == rows
    assert main(["store", "index", str(old)]) == 0
    assert "has every index" in capsys.readouterr().out

"""Shared fixtures for the ALFWorld tests: skip cleanly only when the extra is missing
(the data is kept next to the repo; its absence is a failure, not a skip)."""

from __future__ import annotations

import pytest

pytest.importorskip("alfworld", reason="needs the alfworld extra: pip install 'agentrl[alfworld]'")


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty walkthrough cache (AGENTRL_CACHE) for this test."""
    monkeypatch.setenv("AGENTRL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"

"""The viewer in a real headless browser (Debian's Chromium): runs → run → group → episode.

The store comes from a short ``agentrl rollout`` of ``agentrl/Toy-v0`` plus advantages written
with ``set_advantages``; the viewer runs as ``agentrl view`` in a subprocess on a free port.
Skipped, with the reason, only where no ``chromium`` binary exists (scripts/setup.sh and CI
install it).
"""

from __future__ import annotations

import re
import os
import shutil
import socket
import struct
import subprocess
import sys
import time
from html import unescape
from pathlib import Path

import numpy as np
import pytest

from agentrl.cli import main
from agentrl.store import TurnStore
from view_fixtures import elements

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed; install it with "
                                                         "`apt-get install -y chromium` (scripts/setup.sh does)")
DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img" / "viewer_episode.png"
DOCS_DIR = DOCS_IMG.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _chromium(profile: Path, *args: str, timeout: float = 90) -> str:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
           f"--user-data-dir={profile}", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


@pytest.fixture(scope="module")
def toy_store(tmp_path_factory):
    """A Toy-v0 rollout (2 groups of 4) with gigpo-like advantages at iteration 3 and two metrics."""
    path = tmp_path_factory.mktemp("toy") / "store.sqlite"
    assert main(["rollout", "agentrl/Toy-v0", "--episodes", "8", "--group", "4", "--store", str(path), "--run", "toy",
                 "--seed", "3", "--slots", "2", "--workers", "1", "--max-turns", "8"]) == 0
    with TurnStore(path) as store:
        table = store.table("toy")
        values = np.round(np.random.default_rng(0).standard_normal(table.turn_id.size), 6)
        store.set_advantages("toy", table.turn_id, values, 3, "gigpo")
        for it in range(4):
            store.add_metrics("toy", it, {"rollout/success_rate": 0.1 * it, "update/approx_kl": 0.01 / (it + 1)})
    return path


@pytest.fixture(scope="module")
def server(toy_store):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "agentrl", "view", str(toy_store), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"agentrl view did not start: {proc.stdout.read()}")
            time.sleep(0.2)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=30)


def _link(dom: str, pattern: str) -> str:
    hrefs = [unescape(h) for h in re.findall(r'href="([^"]+)"', dom)]
    found = [h for h in hrefs if re.search(pattern, h)]
    assert found, f"no link matching {pattern!r} among {hrefs[:20]}"
    return found[0]


def test_browser_navigates_to_an_episode_and_shows_the_stored_advantages(server, toy_store, tmp_path):
    profile = tmp_path / "chrome-profile"
    runs = _chromium(profile, "--dump-dom", server + "/")
    run_dom = _chromium(profile, "--dump-dom", server + _link(runs, r"^/run\?run=toy$"))
    assert run_dom.count('class="chart"') == 2 and "rollout/success_rate" in run_dom
    group_dom = _chromium(profile, "--dump-dom", server + _link(run_dom, r"^/group\?run=toy&group=1"))
    episode_url = server + _link(group_dom, r"^/episode\?run=toy&episode=\d+")
    episode_id = int(re.search(r"episode=(\d+)", episode_url).group(1))
    dom = _chromium(profile, "--dump-dom", episode_url)

    with TurnStore(toy_store, readonly=True) as store:
        stored = {a.turn_id: a.value for a in store.advantages("toy", iteration=3, estimator="gigpo")}
        turns = store.turns(episode_id, "toy")
    shown = elements(dom, "adv-main")
    n_page = min(len(turns), 10)  # default turns per page
    assert n_page > 0 and [int(a["data-turn-id"]) for a in shown] == [t.turn_id for t in turns[:n_page]]
    for a in shown:
        assert float(a["data-value"]) == stored[int(a["data-turn-id"])]
        assert a["data-estimator"] == "gigpo" and a["data-iteration"] == "3"
    texts = re.findall(r'class="adv adv-main"[^>]*>([^<]+)<', dom)
    assert [float(x) for x in texts] == pytest.approx([stored[int(a["data-turn-id"])] for a in shown], abs=1e-6)

    png = tmp_path / "viewer_episode.png"
    _chromium(profile, "--window-size=1280,1400", "--hide-scrollbars", f"--screenshot={png}", episode_url)
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", head[16:24]) == (1280, 1400)
    assert png.stat().st_size > 20_000  # a rendered page, not a blank image
    if os.environ.get("AGENTRL_UPDATE_DOCS_IMG") == "1":  # refresh the docs screenshot on request only
        DOCS_IMG.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(png, DOCS_IMG)


@pytest.fixture(scope="module")
def gigpo_store(tmp_path_factory):
    """A run credited as ``agentrl train`` does (``store.table`` of the iteration's episodes, then
    GiGPO with the config's kwargs), with its ``config.yaml`` beside the store: 4 episodes of a
    key-and-door task that revisit states, with token ids (so every turn is trainable)."""
    import yaml

    from agentrl.credit import compute_advantages
    from view_fixtures import make_episode, make_turn

    path = tmp_path_factory.mktemp("gigpo") / "store.sqlite"
    plays = [["hall", "key room", "hall", "door"], ["hall", "door"], ["hall", "key room", "key room"], ["hall", "hall"]]
    rewards = [[0, 0, 0, 10], [0, 0], [0, 0, 0], [0, 0]]
    eps = []
    for states, rs in zip(plays, rewards):
        turns = [make_turn(t, s, float(r), won=r > 0) for t, (s, r) in enumerate(zip(states, rs))]
        for tr, s in zip(turns, states):
            tr.observation = f"You are in the {s}. Exits: north, south."
            tr.action, tr.action_valid = ("open door" if s == "door" else "go north"), True
        eps.append(make_episode(0, "agentrl/Toy-v0", "key-door", turns))
    with TurnStore(path) as store:
        store.add_episodes(eps, run_id="gigpo_toy")
        table = store.table("gigpo_toy", [e.episode_id for e in eps])
        store.set_advantages("gigpo_toy", table.turn_id, compute_advantages(table, "gigpo", gamma=0.9), 0, "gigpo")
        store.add_metrics("gigpo_toy", 0, {"rollout/success_rate": 0.25})
    (path.parent / "config.yaml").write_text(yaml.safe_dump({"run": {"name": "gigpo_toy"}, "algorithm": {
        "estimator": "gigpo", "kwargs": {"gamma": 0.9}}}))
    return path


def test_browser_shows_the_breakdown_and_the_siblings(gigpo_store, tmp_path):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "agentrl", "view", str(gigpo_store), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
                time.sleep(0.2)
        base, profile = f"http://127.0.0.1:{port}", tmp_path / "chrome-profile"
        with TurnStore(gigpo_store, readonly=True) as store:
            stored = {a.turn_id: a.value for a in store.advantages("gigpo_toy")}
        dom = _chromium(profile, "--dump-dom", base + "/episode?run=gigpo_toy&episode=0")
        totals = elements(dom, "bd-total")
        assert len(totals) == 4 and "bd-mismatch" not in dom and "why this advantage (gigpo)" in dom
        for b, a in zip(totals, elements(dom, "adv-main")):
            assert float(b["data-total"]) == pytest.approx(stored[int(a["data-turn-id"])], abs=1e-12)
        sib = _chromium(profile, "--dump-dom", base + "/siblings?run=gigpo_toy&group=0")
        assert len(elements(sib, "sib-col")) == 4 and len(elements(sib, "sib-terms")) == len(stored)
        shots = {"viewer_breakdown.png": ("/episode?run=gigpo_toy&episode=0", "1280,1300"),
                 "viewer_siblings.png": ("/siblings?run=gigpo_toy&group=0", "1280,760")}
        for name, (url, size) in shots.items():
            png = tmp_path / name
            _chromium(profile, f"--window-size={size}", "--hide-scrollbars", f"--screenshot={png}", base + url)
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
            if os.environ.get("AGENTRL_UPDATE_DOCS_IMG") == "1":  # refresh the docs screenshots on request only
                shutil.copyfile(png, DOCS_DIR / name)
    finally:
        proc.terminate()
        proc.wait(timeout=30)

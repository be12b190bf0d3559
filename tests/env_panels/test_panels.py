"""Panels: hashing, persistence, disjointness, cross-process stability."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from agentrl.env.panels import Panel, PanelEntry, assert_disjoint, build_panel, derive_seed, load_panel, save_panel

ENV = "agentrl/Test-v0"


def test_derive_seed_matches_hand_computed_sha256():
    want = int.from_bytes(hashlib.sha256(b"agentrl/Test-v0\nt1\n7").digest()[:4], "big")
    assert derive_seed(ENV, "t1", 7) == want
    assert derive_seed(ENV, "t1", 7) != derive_seed(ENV, "t2", 7)


def test_entries_sorted_and_hash_order_independent():
    a = build_panel("p", env_id=ENV, split="eval", task_ids=["b", "a", "c"])
    b = build_panel("p", env_id=ENV, split="eval", task_ids=["c", "b", "a"])
    assert a.task_ids == ("a", "b", "c")
    assert a.sha256 == b.sha256
    body = {"format": 1, "name": "p", "split": "eval", "entries": [e.to_dict() for e in a.entries]}
    canon = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    assert a.sha256 == hashlib.sha256(canon).hexdigest()


def test_hash_changes_with_any_field():
    base = build_panel("p", env_id=ENV, split="eval", task_ids=["a", "b"])
    assert build_panel("q", env_id=ENV, split="eval", task_ids=["a", "b"]).sha256 != base.sha256
    assert build_panel("p", env_id=ENV, split="eval", task_ids=["a"]).sha256 != base.sha256
    assert build_panel("p", env_id=ENV, split="eval", task_ids=["a", "b"], base_seed=1).sha256 != base.sha256
    assert build_panel("p", env_id=ENV, split="eval", task_ids=["a", "b"], digests={"a": "x"}).sha256 != base.sha256


def test_seeds_per_task_and_adding_task_keeps_seeds():
    p = build_panel("p", env_id=ENV, split="train", task_ids=["a", "b"], seeds_per_task=3)
    assert len(p) == 6 and len({e.seed for e in p.entries}) == 6
    q = build_panel("p", env_id=ENV, split="train", task_ids=["a", "b", "z"], seeds_per_task=3)
    assert {e.seed for e in p.entries} < {e.seed for e in q.entries}


def test_save_load_roundtrip_and_tamper_detected(tmp_path):
    p = build_panel("p", env_id=ENV, split="eval", task_ids=["a", "b"], digests={"a": "d1"})
    path = save_panel(p, tmp_path / "sub" / "p.json")
    assert load_panel(path) == p
    body = json.loads(path.read_text())
    body["entries"][0]["seed"] += 1
    path.write_text(json.dumps(body))
    with pytest.raises(ValueError, match="does not match"):
        load_panel(path)


def test_duplicates_and_empty_rejected():
    with pytest.raises(ValueError, match="duplicate"):
        Panel("p", "eval", (PanelEntry(ENV, "a", 1), PanelEntry(ENV, "a", 1)))
    with pytest.raises(ValueError, match="no task ids"):
        build_panel("p", env_id=ENV, split="eval", task_ids=[])


def test_assert_disjoint():
    tr = build_panel("tr", env_id=ENV, split="train", task_ids=["a", "b"], digests={"b": "D"})
    ev = build_panel("ev", env_id=ENV, split="eval", task_ids=["c"])
    assert_disjoint([tr], [ev])
    with pytest.raises(ValueError, match="1 shared task id"):
        assert_disjoint([tr], [build_panel("e2", env_id=ENV, split="eval", task_ids=["a"])])
    with pytest.raises(ValueError, match="1 shared task digest"):
        assert_disjoint([tr], [build_panel("e3", env_id=ENV, split="eval", task_ids=["x"], digests={"x": "D"})])


def test_verify_digests():
    p = build_panel("p", env_id=ENV, split="eval", task_ids=["a", "b"], digests={"a": "good"})
    p.verify_digests(lambda t: "good")
    with pytest.raises(ValueError, match="different task content"):
        p.verify_digests(lambda t: "other")


def test_hash_stable_across_processes():
    code = (
        "from agentrl.env.panels import build_panel;"
        "print(build_panel('p', env_id='agentrl/Test-v0', split='eval', task_ids=['a','b','ü'], base_seed=3).sha256)"
    )
    here = build_panel("p", env_id=ENV, split="eval", task_ids=["a", "b", "ü"], base_seed=3).sha256
    for hashseed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={"PYTHONHASHSEED": hashseed, "PATH": "/usr/bin:/bin"})
        assert out.stdout.strip() == here

"""ALFWorld panels: shipped manifests match the data, are disjoint and process-stable."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agentrl.env.panels import assert_disjoint
from agentrl_envs.alfworld import data
from agentrl_envs.alfworld.panels import ENV_ID, all_panels, alfworld_panel, shipped_panel


@pytest.mark.parametrize("split,n", [("train", 200), ("eval_seen", 140), ("eval_unseen", 134)])
def test_shipped_panel_matches_data(split, n):
    shipped = shipped_panel(split)
    assert len(shipped) == n and shipped == alfworld_panel(split)
    assert all(e.env_id == ENV_ID for e in shipped.entries)
    by_id = {g.task_id: g.path for g in data.list_games(split)}
    shipped.verify_digests(lambda t: data.content_digest(by_id[t]))


def test_train_eval_disjoint():
    panels = all_panels()
    assert_disjoint([panels["train"]], [panels["eval_seen"], panels["eval_unseen"]])
    with pytest.raises(ValueError, match="overlap"):
        assert_disjoint([panels["eval_seen"]], [panels["eval_seen"]])


def test_panel_hash_same_in_subprocess():
    code = "from agentrl_envs.alfworld.panels import alfworld_panel; print(alfworld_panel('eval_unseen').sha256)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin"}, cwd="/")
    assert out.stdout.strip() == alfworld_panel("eval_unseen").sha256 == shipped_panel("eval_unseen").sha256

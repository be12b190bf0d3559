"""WebShop evaluation panels: shipped manifests equal rebuilt ones, digests resolve, splits disjoint."""

from __future__ import annotations

import json

import pytest

from agentrl.env.panels import derive_seed
from agentrl_envs.webshop.panels import ENV_ID, SHIPPED_SPLITS, all_panels, shipped_panel, verify_panel, webshop_panel
from agentrl_envs.webshop.world import get_world


def test_shipped_panels_match_rebuild_and_resolve(world, data_dir):
    panels = all_panels(data_dir)
    for split in SHIPPED_SPLITS:
        shipped = shipped_panel(split)
        assert shipped.sha256 == panels[split].sha256
        verify_panel(shipped, world)
    assert (len(panels["test"]), len(panels["eval"])) == (500, 1000)
    assert len(panels["train"]) + len(panels["eval"]) + len(panels["test"]) <= 6910
    e = shipped_panel("test").entries[0]
    assert e.env_id == ENV_ID and e.seed == derive_seed(ENV_ID, e.task_id, 0)
    assert e.digest == world.goal(e.task_id).digest()


def test_panel_entries_replay_the_same_goal(env, world):
    """A panel entry reproduces its task: reset(seed, task_id) shows the goal the digest names."""
    for e in shipped_panel("eval").entries[:5]:
        obs, info = env.reset(seed=e.seed, options={"task_id": e.task_id})
        g = world.goal(e.task_id)
        assert info["task_id"] == e.task_id and g.instruction_text in obs and g.digest() == e.digest


def test_other_price_seed_fails_verification(data_dir):
    other = get_world(data_dir, "synthetic", price_seed=1)
    with pytest.raises(ValueError, match="different task content"):
        verify_panel(shipped_panel("test"), other)


def test_shipped_files_are_canonical_json(tmp_path):
    from agentrl_envs.webshop.panels import PANEL_DIR

    for split in SHIPPED_SPLITS:
        body = json.loads((PANEL_DIR / f"webshop-synthetic-{split}.json").read_text())
        assert body["name"] == f"webshop-synthetic-{split}" and body["split"] == split
    with pytest.raises(FileNotFoundError):
        shipped_panel("train")
    assert webshop_panel("test", base_seed=1).sha256 != shipped_panel("test").sha256

"""The three tree/hidden-state example configs run to completion with SmolLM2 on CPU at a
tiny budget (one iteration, short episodes). Slow: SmolLM2 + ALFWorld/WebShop resets."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")

from agentrl.config import load_config  # noqa: E402
from agentrl.store import TurnStore  # noqa: E402

TINY = ["run.iterations=1", "run.eval_every=0", "run.save_every=0", "log.console=false", "env.max_turns=3",
        "rollout.groups_per_iteration=1", "policy.max_tokens=24"]
CASES = {
    "tree_grpo_webshop": ["rollout.tree.trees=2", "rollout.tree.branches=1", "rollout.tree.leaves=2"],
    "rtpo_alfworld": ["rollout.group_size=1", "rollout.tree.siblings=2", "rollout.tree.stride=1"],
    "bipace_alfworld": ["rollout.group_size=2"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_example_config_runs(name, smollm2_dir, tmp_path):
    from agentrl.train import train

    cfg = load_config(f"examples/{name}.yaml", TINY + CASES[name] + [f"run.out_dir={tmp_path}"])
    res = train(cfg, resume=False)
    assert res.state.iteration == 1
    with TurnStore(res.store_path, readonly=True) as store:
        table = store.table(run_id=res.run_id)
        n_adv = len(store.advantages(res.run_id))
    assert len(table) > 0 and n_adv > 0
    if name.startswith("tree"):
        assert table.tree is not None and (table.parent >= 0).any()
    elif name.startswith("rtpo"):
        assert table.branch is not None and (table.branch >= 0).sum() >= 2
    else:
        assert table.hidden is not None and np.isfinite(table.hidden).all()
    metrics = json.loads((res.run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert "rollout/mean_return" in metrics

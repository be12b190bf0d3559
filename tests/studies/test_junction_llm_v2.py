"""``studies/junction_llm_v2.py`` (issue 51's LLM study, its calibration cells): the prompt pin holds
on this checkout and a changed prompt stops a cell before it trains; the cell's config (the candidate's
maze, groups, fp32, no KL probe: rollout_correction none); the success AUC by hand."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from studies import junction_llm_v2 as v2  # noqa: E402
from studies.runner import Cell  # noqa: E402


def test_the_pinned_prompt_is_this_checkouts(smollm2_dir):
    assert v2.prompt_fingerprint() == v2.PROMPT_SHA256


def test_a_changed_prompt_stops_the_cell_before_training(monkeypatch, tmp_path):
    monkeypatch.setattr(v2, "PROMPT_SHA256", "0" * 64)
    monkeypatch.setattr(v2, "prompt_fingerprint", lambda: "f" * 64)
    cell = Cell("junction_llm_v2", "cal-k5-x2-h12-4x8-grpo-s0", {"k": 5, "exits": 2, "hinted": 12, "groups": 4,
                                                                   "size": 8, "arm": "grpo", "iterations": 30,
                                                                   "panel": 256, "dtype": "float32"})
    with pytest.raises(RuntimeError, match="prompt changed"):
        v2.run(cell, tmp_path / "cal")
    assert not (tmp_path / "cal").exists()


def test_the_cell_config(tmp_path):
    from studies.junction_llm import config_for
    from studies.oracle_arm import oracle_registered

    cfg = {"k": 5, "exits": 3, "hinted": 12, "groups": 8, "size": 4}
    with oracle_registered():
        c = config_for("oracle", 5, 0, 30, tmp_path, "float32", v2.overrides(cfg, "cal-x"))
    assert c.env.kwargs == {"k": 5, "n_exits": 3, "n_hinted": 12} and c.run.name == "cal-x"
    assert (c.rollout.groups_per_iteration, c.rollout.group_size) == (8, 4) and c.policy.dtype == "float32"
    assert c.update.rollout_correction == "none" and c.update.sampler_kl_every == 0
    assert c.algorithm.estimator == "exact_oracle" and c.run.iterations == 30 and c.run.save_every == 1


def test_success_auc_by_hand():
    per = [{"success": s, "first_junction_right": f} for s, f in zip([0.0, 0.5, 1.0] * 10, [1.0, 0.0] * 15)]
    out = v2.summarize(per, 30)
    assert out["auc"] == {"8": pytest.approx((0 + .5 + 1 + 0 + .5 + 1 + 0 + .5) / 8), "16": pytest.approx(7.5 / 16),
                          "30": pytest.approx(0.5)}
    assert out["first_junction"] == 0.5
    assert v2.summarize(per[:10], 10)["auc"].keys() == {"8"}

"""``studies/junction_llm_v2.py`` (issue 51's LLM study, its calibration cells): the prompt pin holds
on this checkout and a changed prompt stops a cell before it trains; the cell's config (the candidate's
maze, groups, fp32, no KL probe: rollout_correction none); the success AUC by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from studies import junction_llm_v2 as v2  # noqa: E402
from studies.runner import Cell  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


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


# ---- the study under the rule: seed count, grid, held-out checkpoints, the tables ----

def _row(arm, seed, k=5, success=0.5, auc=0.4):
    return {"arm": arm, "seed": seed, "k": k, "held_out_exact": {str(v2.PRIMARY_AT): success},
            "eval": {"success_rate": 0.25}, "auc": {str(v2.PRIMARY_AT): auc}}


def test_seeds_planned_by_hand(monkeypatch):
    monkeypatch.setattr(v2, "GAP", 10.0)
    rows = [_row("grpo", s, success=0.2) for s in (1, 2, 3)] + [_row("oracle", 1, success=0.3),
                                                                 _row("oracle", 2, success=0.4)]
    assert v2.seeds_planned(rows) == v2.FIRST_SEEDS  # the oracle's seed 3 is missing: the SD is not read yet
    rows.append(_row("oracle", 3, success=0.5))  # oracle − GRPO 10, 20, 30 points: SD 10
    assert v2.seeds_planned(rows) == 8  # ceil((2.8 · 10 / 10)^2) = ceil(7.84)
    monkeypatch.setattr(v2, "GAP", 20.0)
    assert v2.seeds_planned(rows) == 3  # ceil(1.96) = 2, at least FIRST_SEEDS
    monkeypatch.setattr(v2, "GAP", 2.0)
    assert v2.seeds_planned(rows) == v2.MAX_SEEDS  # 196 capped
    assert v2.seeds_planned(rows + [_row("oracle", 3, k=1, success=0.9)]) == v2.MAX_SEEDS  # K = 1 rows: not read


def test_the_grid_before_and_after_the_rule(monkeypatch):
    monkeypatch.setattr(v2, "CONDITION", None)
    assert [c.key for c in v2.grid()] == [v2.cell_key(c, a) for c in v2.CANDIDATES for a in v2.ARMS]
    monkeypatch.setattr(v2, "CONDITION", (2, 12, 4, 8))
    monkeypatch.setattr(v2, "finished", lambda root, study: [])
    cells = v2.grid()[len(v2.CANDIDATES) * len(v2.ARMS):]
    assert len(cells) == 2 * v2.FIRST_SEEDS * len(v2.STUDY_ARMS)
    assert cells[0].key == "k5-x2-h12-4x8-grpo-s1" and cells[-1].key == f"k1-x2-h12-4x8-oracle-s{v2.FIRST_SEEDS}"
    assert {c.seed for c in cells} == set(range(1, v2.FIRST_SEEDS + 1))  # seed 0 is the calibration's
    assert cells[0].config["held_out_at"] == list(v2.HELD_OUT_AT) and cells[0].config["dtype"] == "float32"
    assert cells[0].config["panel"] == v2.PANEL == 256 and cells[-1].config["panel"] == 129  # K = 1: the whole split


def test_the_grid_reads_the_seed_count_under_the_root_it_is_given(monkeypatch, tmp_path):
    """``--root`` elsewhere: the seed count comes from the cells finished there, not from studies/."""
    monkeypatch.setattr(v2, "CONDITION", (2, 12, 4, 8))
    seen = []
    monkeypatch.setattr(v2, "finished", lambda root, study: seen.append(root) or [])
    cells = v2.grid(tmp_path)[len(v2.CANDIDATES) * len(v2.ARMS):]
    assert seen == [tmp_path] and len(cells) == 2 * v2.FIRST_SEEDS * len(v2.STUDY_ARMS)
    rows = [{"row": _row(arm, s, success=(0.1 if arm == "grpo" else d))} | {"key": f"k5-{arm}-s{s}"}
            for s, d in zip((1, 2, 3), (0.2, 0.5, 0.1)) for arm in ("grpo", "oracle")]
    monkeypatch.setattr(v2, "finished", lambda root, study: rows if root == tmp_path else [])
    n = v2.seeds_planned([r["row"] for r in rows])
    assert n > v2.FIRST_SEEDS and len(v2.grid(tmp_path)) - len(v2.CANDIDATES) * len(v2.ARMS) == 2 * n * len(v2.STUDY_ARMS)
    assert len(v2.grid(tmp_path / "elsewhere")) - len(v2.CANDIDATES) * len(v2.ARMS) == 2 * v2.FIRST_SEEDS * len(v2.STUDY_ARMS)


def test_the_k1_panel_is_drawable_where_256_is_not():
    """The K = 1 control's first cell trained, then stopped the runner at its greedy panel: 256 mazes asked of
    an eval split of 129 (2026-12-07). ``panel_size`` asks for what the split has; the trainer's own panel
    draw (``agentrl.eval.eval_panel``) takes it."""
    from agentrl.eval import eval_panel
    from agentrl.train.checks import load_checked_config

    cell = v2.study_cell(1, "grpo", 1)
    base = ["env.kwargs=" + json.dumps({"k": 1, "n_exits": 2, "n_hinted": 12})]
    cfg = load_checked_config(ROOT / "examples" / "grpo_junction.yaml", base + [f"env.eval_panel_size={cell.config['panel']}"])
    assert len({e.task_id for e in eval_panel(cfg).entries}) == 129
    with pytest.raises(ValueError, match="at most 129"):
        eval_panel(load_checked_config(ROOT / "examples" / "grpo_junction.yaml", base + ["env.eval_panel_size=256"]))



def test_run_scores_every_held_out_checkpoint(monkeypatch, tmp_path):
    import studies.junction_llm as jl

    ckpt = tmp_path / "run" / "checkpoints" / "iter_000030"
    monkeypatch.setattr(v2, "prompt_fingerprint", lambda: v2.PROMPT_SHA256)
    per = [{"success": 0.5, "first_junction_right": 1.0}] * 30
    monkeypatch.setattr(jl, "run_cell", lambda *a, **k: {"per_iter": per, "checkpoint": str(ckpt), "run_dir": "r"})
    monkeypatch.setattr(jl, "evaluate_row", lambda row, panel: {"success_rate": 0.25, "n": panel,
                                                                "checkpoint": Path(row["checkpoint"]).name})
    seen = []
    monkeypatch.setattr(v2, "exact_held_out", lambda run_dir, ckpts: seen.append((run_dir, ckpts)) or [0.1, 0.2, 0.3])
    monkeypatch.setattr(v2, "CONDITION", (2, 12, 4, 8))
    row = v2.run(v2.study_cell(5, "g2po", 1), tmp_path / "run")
    assert seen == [(tmp_path / "run", [str(ckpt.parent / f"iter_{n:06d}") for n in (8, 16, 30)])]
    assert row["held_out_exact"] == {"8": 0.1, "16": 0.2, "30": 0.3} and v2.primary(row) == 0.2  # PRIMARY_AT 16
    assert row["eval"] == {"success_rate": 0.25, "n": 256, "checkpoint": "iter_000030"}  # greedy: the final one


def test_the_rule_is_committed():
    """The rule's constants (benchmarks/RESULTS.md, "The rule") hold on a clean checkout: the chosen candidate,
    the primary checkpoint among the scored ones, a positive gap and band."""
    assert v2.CONDITION is not None and (5, *v2.CONDITION) in v2.CANDIDATES
    assert v2.PRIMARY_AT in v2.HELD_OUT_AT and max(v2.HELD_OUT_AT) == v2.ITERATIONS
    assert v2.GAP > 0 and v2.BAND > 0 and 3 <= v2.FIRST_SEEDS <= v2.MAX_SEEDS


def test_paired_mazes_by_hand():
    from studies.junction_llm_v2_report import paired_mazes

    a = {"panel_sha256": "p", "outcomes": [["m1", 1.0], ["m2", 1.0], ["m3", 0.0], ["m4", 1.0]]}
    b = {"panel_sha256": "p", "outcomes": [["m1", 0.0], ["m2", 1.0], ["m3", 0.0], ["m4", 0.0]]}
    p = paired_mazes(a, b)  # d = 1, 0, 0, 1: mean 0.5, var 0.25, se 0.25
    assert (p["n"], p["a_only"], p["b_only"]) == (4, 2, 0) and p["mean"] == pytest.approx(50.0)
    assert p["ci95"] == pytest.approx((50 - 1.96 * 25, 50 + 1.96 * 25))
    with pytest.raises(ValueError, match="different panels"):
        paired_mazes(a, {**b, "panel_sha256": "q"})


def _result(arm, seed, k, success, key=None):
    row = {**_row(arm, seed, k, success), "iterations": 30, "first_junction": 0.6,
           "per_iter": [{"success": success, "first_junction_right": 0.5}] * 30}
    row["held_out_exact"] = {"8": success / 2, "16": success, "30": success}
    return {"key": key or f"k{k}-x2-h12-4x8-{arm}-s{seed}", "seed": seed, "seconds": 100.0, "row": row,
            "config": {"k": k, "exits": 2, "hinted": 12, "groups": 4, "size": 8}}


def test_the_study_table_reads_the_rule(monkeypatch, tmp_path):
    from studies import junction_llm_v2_report as rep

    monkeypatch.setattr(v2, "GAP", 10.0)
    monkeypatch.setattr(v2, "BAND", 5.0)
    succ = {"grpo": (0.20, 0.30, 0.25), "g2po": (0.28, 0.36, 0.35), "graphgpo": (0.20, 0.31, 0.26),
            "oracle": (0.40, 0.50, 0.45)}
    res = [_result(a, s + 1, 5, v) for a, vs in succ.items() for s, v in enumerate(vs)]
    res += [_result(a, s + 1, 1, 0.7 + 0.001 * s) for a in succ for s in range(3)]
    res[0].update(seconds=50.0, launches=[{"started": "t0"}, {"started": "t1"}])  # grpo seed 1 resumed: its seconds left out
    text = rep.study_table(res)
    assert "| 5 | g2po | 3 | 28.0 / 36.0 / 35.0 | 33.0 % | 40.0 % | 25.0 % | 100 (3) |" in text
    assert "| 5 | grpo | 3 | 20.0 / 30.0 / 25.0 | 25.0 % |" in text and "| 100 (2) |" in text
    # g2po − GRPO: 8, 6, 10 → mean 8, SD 2, 95 % t: 8 ± 4.303 · 2 / sqrt(3) = [+3.0, +13.0]; oracle's gap 20
    assert "| 5 | g2po | 3 | +8.0 | [+3.0, +13.0] |" in text and "| 0.40 |" in text
    assert "g2po's 95 % interval excludes 0 at K = 5" in text and "graphgpo's 95 %" not in text
    assert "K = 1 g2po: equivalent (±5)" in text
    assert "Seeds planned by the rule: 3." in text  # oracle − GRPO 20, 20, 20: SD 0
    assert rep.plot(res, tmp_path / "c.png", untrained={"k5-x2-h12": 0.1}).stat().st_size > 10_000


def test_the_calibration_table_and_its_exact_file(tmp_path):
    from studies import junction_llm_v2_report as rep

    def cal(arm, held, auc):
        r = _result(arm, 0, 5, 0.1, key=f"cal-k5-x2-h12-4x8-{arm}-s0")
        r["row"].update(auc={"8": auc, "16": auc, "30": auc}, eval={"panel_sha256": "p", "n": 2, "success_rate": .5,
                                                                   "outcomes": [["a", 1.0], ["b", 0.0]]})
        del r["row"]["held_out_exact"]
        return r, {"8": held, "16": held + 0.1, "30": held + 0.2}

    (g, gx), (o, ox) = cal("grpo", 0.1, 0.2), cal("oracle", 0.3, 0.25)
    folder = tmp_path / "results" / "junction_llm_v2"
    folder.mkdir(parents=True)
    for r in (g, o):
        (folder / f"{r['key']}.json").write_text(json.dumps(r))
    (tmp_path / "results" / v2.CALIBRATION_EXACT).write_text(json.dumps(
        {"cells": {g["key"]: gx, o["key"]: ox}, "untrained": {"k5-x2-h12": 0.05}}))
    results = rep.load(tmp_path)
    assert results[0]["row"]["held_out_exact"] == gx and v2.primary(results[0]["row"]) == pytest.approx(0.2)
    text = rep.calibration_table(results, {"k5-x2-h12": 0.05})
    assert "| 5, 2, 12, 4 × 8 | grpo | 10.0 / 20.0 / 30.0 (untrained 5.0) | 20.0 / 20.0 / 20.0 |" in text
    assert "| (5, 2, 12, 4, 8) | +20.0 / +20.0 / +20.0 | +5.0 / +5.0 / +5.0 | +0.0 [+0.0, +0.0] | 0 / 0 |" in text

"""studies/overlap_fidelity.py (issue 50): its cells, the warm-up config (the OPRL example at the
cell's paraphrase and K, fp32, checked), the overlap measure on hand tables, and the summary table."""

from __future__ import annotations

from agentrl.types import TurnTable
from studies.overlap_fidelity import EXTRA, grid, make_cell, overlap, summary, warmup_config


def _table(anchors: list[int], episodes: list[int], groups: list[int], ok=None) -> TurnTable:
    n = len(anchors)
    return TurnTable(group=groups, episode=episodes, t=[0] * n, reward=[0.0] * n, terminated=[1] * n,
                     truncated=[0] * n, action_valid=[1] * n, anchor_key=anchors, next_anchor_key=anchors,
                     action_key=[0] * n, parent=[-1] * n, episode_ok=ok or [1] * n, trainable=[1] * n,
                     turn_id=list(range(n)))


def test_overlap_counts_states_another_episode_of_the_group_saw():
    # group 0: anchor 5 seen by episodes 0 and 1 (both rows count), anchor 6 twice by episode 0 only (no)
    tb = _table([5, 5, 6, 6, 5], [0, 1, 0, 0, 2], [0, 0, 0, 0, 1])
    assert overlap(tb) == 2 / 5  # episode 2's anchor 5 is in another group
    assert overlap(_table([5, 5], [0, 1], [0, 0], ok=[1, 0])) == 0.0  # a failed episode's row is not eligible


def test_cells_and_the_warmup_config(tmp_path):
    keys = [c.key for c in grid()]
    assert keys == ["p0-k1-s0", "p1-k1-s0", "p0-k5-s0", "p1-k5-s0"]
    cfg = warmup_config(make_cell(1, 5), tmp_path)
    assert cfg.algorithm.estimator == "oprl" and cfg.env.kwargs == {"k": 5, "paraphrase": 1}
    assert cfg.policy.dtype == "float32" and cfg.policy.lora is not None and cfg.run.save_every == 1
    assert cfg.algorithm.scorers["prm"]["prm_lr"] is None  # the trained PRM (2 x update.lr)
    assert [n for n, _, _ in EXTRA] == ["oprl", "oprl_frozen", "stepopsd", "stepopsd_large"]


def test_summary_table():
    fid = {"grpo": {"corr": 0.25, "failed_credit": 0.0, "overlap": 0.9}, "oprl": {"corr": 0.5, "failed_credit": 0.4,
                                                                                  "overlap": 0.9}}
    rows = [{"row": {"paraphrase": 0, "k": 1, "fidelity": fid}},
            {"row": {"paraphrase": 1, "k": 1, "fidelity": {**fid, "grpo": {**fid["grpo"], "overlap": 0.0}}}}]
    text = summary(rows)
    assert "| oprl | +0.50 / 0.40 | +0.50 / 0.40 |" in text
    assert text.splitlines()[-1].endswith("| 0.90 | 0.00 |")

"""Pure parts of the viewer: branch trees, SVG charts, token spans and colours."""

from __future__ import annotations

import re

import numpy as np
import pytest

from agentrl.view.charts import line_chart, order_metrics
from agentrl.view.tokens import Decoder, advantage_colour, completion_spans
from agentrl.view.tree import build_forest, is_branched
from agentrl.view.turns import GroupTurn


def _g(tid, eid, t, parent):
    return GroupTurn(tid, eid, t, parent, f"a{tid}", True, 0.0, "s")


def _shape(branch):
    return ([g.turn_id for g in branch.chain], [_shape(c) for c in branch.children])


def test_linear_episodes_are_not_branched_and_stay_single_chains():
    turns = [_g(0, 0, 0, None), _g(1, 0, 1, 0), _g(2, 1, 0, None), _g(3, 1, 1, 2)]
    assert not is_branched(turns)
    assert [_shape(b) for b in build_forest(turns)] == [([0, 1], []), ([2, 3], [])]


def test_tree_rollout_forks_are_nested_under_their_branch_point():
    # episode 0: 0 → 1 → 2; episode 1 forks after turn 0 (3 → 4); episode 2 forks after turn 1 (5)
    turns = [_g(0, 0, 0, None), _g(1, 0, 1, 0), _g(2, 0, 2, 1), _g(3, 1, 1, 0), _g(4, 1, 2, 3), _g(5, 2, 2, 1)]
    assert is_branched(turns)
    (root,) = build_forest(turns)
    assert _shape(root) == ([0], [([1], [([2], []), ([5], [])]), ([3, 4], [])])
    assert root.children[1].episodes == [1]


def test_a_parent_in_another_episode_counts_as_a_branch_and_cycles_terminate():
    assert is_branched([_g(0, 0, 0, None), _g(1, 1, 0, 0)])
    cyc = [_g(0, 0, 0, 1), _g(1, 0, 1, 0), _g(2, 0, 2, None)]  # corrupt: 0 ↔ 1
    forest = build_forest(cyc)
    assert [_shape(b) for b in forest] == [([2], [])]  # unreachable cycle is not drawn, no hang


def test_long_chains_need_no_recursion():
    turns = [_g(0, 0, 0, None)] + [_g(i, 0, i, i - 1) for i in range(1, 5000)]
    (root,) = build_forest(turns)
    assert len(root.chain) == 5000 and root.children == []


def test_line_chart_points_labels_and_escaping():
    svg = line_chart("adv/<std>", [0, 1, 2, 3], [1.0, float("nan"), 3.0, 2.0])
    assert "adv/&lt;std&gt;" in svg and "<std>" not in svg
    (pts,) = re.findall(r'points="([^"]+)"', svg)
    xy = [tuple(map(float, p.split(","))) for p in pts.split()]
    assert len(xy) == 3  # NaN skipped
    assert xy[0][0] < xy[1][0] < xy[2][0]
    assert xy[1][1] < xy[2][1] < xy[0][1]  # 3.0 highest (smallest y), 1.0 lowest
    assert "iteration 2: 3</title>" in svg and ">3</text>" in svg and ">1</text>" in svg


def test_line_chart_thins_long_runs_and_checks_lengths():
    svg = line_chart("kl", list(range(10_001)), [float(i) for i in range(10_001)], max_points=100)
    (pts,) = re.findall(r'points="([^"]+)"', svg)
    assert len(pts.split()) <= 102 and ">10000</text>" in svg
    assert "no finite values" in line_chart("x", [0], [float("inf")])
    with pytest.raises(ValueError, match="one value per iteration"):
        line_chart("x", [0, 1], [1.0])


def test_metrics_are_ordered_by_priority():
    assert order_metrics(["time/s", "update/entropy", "update/approx_kl", "rollout/success_rate", "adv/std"]) == [
        "rollout/success_rate", "adv/std", "update/approx_kl", "update/entropy", "time/s"]


def test_advantage_colour_sign_and_scale():
    assert advantage_colour(None, 1.0) == "transparent"
    assert advantage_colour(0.5, 1.0) == "rgba(22,163,74,0.47)"
    assert advantage_colour(-2.0, 1.0) == "rgba(220,38,38,0.85)"  # clipped at the scale
    assert advantage_colour(0.0, 1.0).endswith("0.06)")


def test_completion_spans_with_and_without_a_tokenizer(word_tokenizer):
    ids, lps = np.array([1, 2, 5], np.int32), np.array([-0.5, -1.25], np.float32)  # a logprob missing
    plain = completion_spans(ids, lps, 0.5, 1.0, None)
    assert [(s.token_id, s.text, s.logprob, s.mask) for s in plain] == [(1, "", -0.5, 1), (2, "", -1.25, 1), (5, "", None, 1)]
    assert plain[0].title == "id 1 · logprob -0.5000 · mask 1" and plain[2].title.startswith("id 5 · logprob n/a")
    dec = Decoder(word_tokenizer.parent)  # a folder holding tokenizer.json
    spans = completion_spans(ids, lps, -0.5, 1.0, dec)
    assert [s.text for s in spans] == ["look", "north", "<eos>"]
    assert spans[1].title == "id 2 · logprob -1.2500 · mask 1 · 'north'"
    assert spans[0].colour == advantage_colour(-0.5, 1.0)
    assert dec.text(np.array([3, 4], np.int32)) == "door open"


def test_decoder_names_a_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
        Decoder(tmp_path)

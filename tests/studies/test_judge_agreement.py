"""studies/judge_agreement.py: the spoiled walkthroughs, Cohen's κ and the summary by hand, and
the episodes it builds on real WebShop (the label is the env's, the judge never sees the score)."""

from __future__ import annotations

import math

import pytest

from studies.judge_agreement import episode, kappa, spoil, summary

WALK = ["search[blue mug]", "click[b000000001]", "click[large]", "click[buy now]"]


def test_spoil_by_hand():
    results = ["b000000001", "b000000002", "next >", "back to search"]
    assert spoil(WALK, results, "no_options") == ["search[blue mug]", "click[b000000001]", "click[buy now]"]
    assert spoil(WALK, results, "no_purchase") == ["search[blue mug]", "click[b000000001]", "click[large]"]
    assert spoil(WALK, results, "wrong_product") == ["search[blue mug]", "click[b000000002]", "click[buy now]"]


def test_kappa_and_summary_by_hand():
    y, p = [True, True, False, False], [True, False, False, False]
    # po = 3/4, pe = 1/2 * 1/4 + 1/2 * 3/4 = 1/2: κ = (3/4 - 1/2) / (1/2) = 1/2
    assert kappa(y, p) == pytest.approx(0.5)
    assert kappa([True, False], [True, True]) == 0.0 and math.isnan(kappa([True, True], [True, True]))
    rows = [{"verdict": "pass_fail", "won": a, "score": float(b), "seconds": 2.0, "prompt_chars": 10}
            for a, b in zip(y, p)] + [{"verdict": "pass_fail", "won": True, "score": None, "seconds": 1.0,
                                       "prompt_chars": 10}]
    s = summary(rows)["pass_fail"]
    assert (s["episodes"], s["won"], s["tp"], s["fp"], s["fn"], s["tn"], s["errors"]) == (4, 2, 1, 0, 1, 2, 1)
    assert s["accuracy"] == 0.75 and s["kappa"] == pytest.approx(0.5) and s["seconds_per_episode"] == 2.0


@pytest.mark.parametrize("mode, won", [("oracle", True), ("no_purchase", False), ("wrong_product", False)])
def test_episodes_on_real_webshop(mode, won):
    ep = episode(0, mode)
    assert ep.success is won and ep.env_id == "agentrl/WebShop-v0" and ep.turns
    assert (ep.turns[-1].action == "click[buy now]") is (mode != "no_purchase")
    assert all("Your score" not in t.observation for t in ep.turns)  # the judge never sees the env's score page
    if mode == "no_purchase":
        assert all(t.action != "click[buy now]" for t in ep.turns)

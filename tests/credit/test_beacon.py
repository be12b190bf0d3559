"""BEACON (ALGORITHMS.md §15): the worked example of §15.6 (float64, 1e-9), the edge cases of
§15.5, the segment rules of §15.3 and the registry-level invariants."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from credit_reference import beacon as reference_beacon
from credit_tables import random_table

from agentrl.credit import compute_advantages, estimator_params, explain_advantages, get_estimator
from agentrl.credit._segments import canonical
from agentrl.credit.beacon import milestone_segments
from agentrl.types import Episode, Turn, TurnTable

ATOL = 1e-9
EPS = 1e-6
SPEC = dict(milestone_gamma=0.9, step_advantage_w=1.0, mode="mean_norm", c_inv=0.1, milestone_reward=10.0)

# §15.6: one uid. A success in 5 turns (milestones at t = 1, 2, 4, reward 10 at t4); B failure in 4
# turns, truncated (milestone at t = 2, t1 invalid); C failure in 3 turns, no milestone.
# (episode, t, reward, valid, milestone)
ROWS_156 = [
    ("A", 0, 0.0, True, False), ("A", 1, 0.0, True, True), ("A", 2, 0.0, True, True), ("A", 3, 0.0, True, False),
    ("A", 4, 10.0, True, True),
    ("B", 0, 0.0, True, False), ("B", 1, 0.0, False, False), ("B", 2, 0.0, True, True), ("B", 3, 0.0, True, False),
    ("C", 0, 0.0, True, False), ("C", 1, 0.0, True, False), ("C", 2, 0.0, True, False),
]
# the spec's table, row by row: seg, step_t, score_t, A_ep, A_seg, A (w = 1), A (w = 10)
WANT_156 = [
    (0, 9.0, 10.0, 5.841667, 3.25, 9.091667, 38.341667),
    (0, 10.0, 10.0, 5.841667, 4.25, 10.091667, 48.341667),
    (1, 10.0, 10.0, 5.841667, 5.0, 10.841667, 55.841667),
    (2, 9.0, 10.0, 5.841667, -0.5, 5.341667, 0.841667),
    (2, 10.0, 10.0, 5.841667, 0.5, 6.341667, 10.841667),
    (0, 8.1, 0.0, -4.158333, 2.35, -1.808333, 19.341667),
    (0, 8.9, -0.1, -4.258333, 3.15, -1.108333, 27.241667),
    (0, 10.0, 0.0, -4.158333, 4.25, 0.091667, 38.341667),
    (1, 0.0, 0.0, -4.158333, -5.0, -9.158333, -54.158333),
    (0, 0.0, 0.0, -4.158333, -5.75, -9.908333, -61.658333),
    (0, 0.0, 0.0, -4.158333, -5.75, -9.908333, -61.658333),
    (0, 0.0, 0.0, -4.158333, -5.75, -9.908333, -61.658333),
]
EP_SUM = 49.9  # episode scores summed over the 12 rows: 5·10 + (0 − 0.1 + 0 + 0) + 3·0


def table(rows, *, group=None, n_milestones=None, episode_ok=None, trainable=None, milestone=True) -> TurnTable:
    """A TurnTable from (episode, t, reward, valid, milestone) tuples; one uid unless ``group``."""
    n = len(rows)
    eps = {e: i for i, e in enumerate(dict.fromkeys(r[0] for r in rows))}
    last = {}
    for i, r in enumerate(rows):
        if r[0] not in last or r[1] > rows[last[r[0]]][1]:
            last[r[0]] = i
    return TurnTable(
        group=[0] * n if group is None else group, episode=[eps[r[0]] for r in rows], t=[r[1] for r in rows],
        reward=[r[2] for r in rows], terminated=[r[2] > 0 for r in rows],
        truncated=[last[r[0]] == i and r[2] == 0 for i, r in enumerate(rows)], action_valid=[r[3] for r in rows],
        anchor_key=np.zeros(n, np.int64), next_anchor_key=np.zeros(n, np.int64), action_key=np.zeros(n, np.int64),
        parent=[i - 1 if r[1] > 0 else -1 for i, r in enumerate(rows)],
        episode_ok=[True] * n if episode_ok is None else episode_ok,
        trainable=[True] * n if trainable is None else trainable, turn_id=list(range(n)),
        milestone=[r[4] for r in rows] if milestone else None,
        n_milestones=None if n_milestones is None else n_milestones,
    )


def test_section_15_6_hand_values_exact():
    want = np.array(WANT_156)
    # the hand values are the spec's 6-decimal table; recompute them exactly from its hand check
    mean_ep, mean0, mean1, mean2 = EP_SUM / 12, 5.75, 5.0, 9.5
    np.testing.assert_allclose(want[:, 3], [round(s - mean_ep, 6) for s in want[:, 2]], atol=ATOL)
    exact_seg = [9 - mean0, 10 - mean0, 10 - mean1, 9 - mean2, 10 - mean2, 8.1 - mean0, 8.9 - mean0, 10 - mean0,
                 0 - mean1, 0 - mean0, 0 - mean0, 0 - mean0]
    np.testing.assert_allclose(want[:, 4], exact_seg, atol=ATOL)
    exact_ep = np.array([s - mean_ep for s in want[:, 2]])
    for w, col in ((1.0, 5), (10.0, 6)):
        got = compute_advantages(table(ROWS_156, n_milestones=[3] * 12), "beacon", **{**SPEC, "step_advantage_w": w})
        np.testing.assert_allclose(got, exact_ep + w * np.array(exact_seg), atol=ATOL, rtol=0)
        np.testing.assert_allclose(got, want[:, col], atol=5e-7, rtol=0)  # the spec's rounding


def test_section_15_6_segments_and_step_rewards():
    tb = table(ROWS_156, n_milestones=[3] * 12)
    st, order = canonical(tb)
    seg, done, dist = milestone_segments(st)
    np.testing.assert_array_equal(seg, [int(r[0]) for r in WANT_156])
    np.testing.assert_array_equal(done, [True] * 8 + [False] * 4)
    b = explain_advantages(tb, "beacon", **SPEC)
    np.testing.assert_allclose(b.extras["step reward"], [r[1] for r in WANT_156], atol=ATOL)
    np.testing.assert_allclose(b.terms[0].value, [r[2] - EP_SUM / 12 for r in WANT_156], atol=ATOL)
    np.testing.assert_allclose(b.total(), compute_advantages(tb, "beacon", **SPEC), atol=ATOL)
    # without n_milestones (the WebShop / dynamic rule) nothing changes here: A never has a tail
    np.testing.assert_array_equal(compute_advantages(table(ROWS_156), "beacon", **SPEC),
                                  compute_advantages(tb, "beacon", **SPEC))


def test_defaults_are_the_released_alfworld_script():
    assert estimator_params("beacon") == dict(milestone_gamma=0.9, step_advantage_w=10.0, mode="mean_norm",
                                              stats_over="steps", milestone_reward=10.0, c_inv=0.1, eps=EPS)
    assert get_estimator("beacon").requires == ("milestone",)
    want = np.array(WANT_156)[:, 6]
    np.testing.assert_allclose(compute_advantages(table(ROWS_156, n_milestones=[3] * 12), "beacon"), want, atol=5e-7)


def test_alfworld_tail_after_full_walkthrough_is_its_own_group():
    # two episodes that match the whole 2-milestone walkthrough, then keep acting: their tails form
    # group (uid, −1) — not the segment m = 2 of another episode — and tie → 0
    rows = [("A", 0, 0.0, True, True), ("A", 1, 0.0, True, True), ("A", 2, 0.0, True, False),
            ("B", 0, 0.0, True, True), ("B", 1, 0.0, True, True), ("B", 2, 0.0, True, False),
            ("C", 0, 0.0, True, False), ("C", 1, 0.0, True, True), ("C", 2, 0.0, True, False)]
    st, _ = canonical(table(rows, n_milestones=[2] * 9))
    np.testing.assert_array_equal(milestone_segments(st)[0], [0, 1, -1, 0, 1, -1, 0, 0, 1])
    st, _ = canonical(table(rows))  # dynamic rule: the tails are segment m = 2
    np.testing.assert_array_equal(milestone_segments(st)[0], [0, 1, 2, 0, 1, 2, 0, 0, 1])
    got = compute_advantages(table(rows, n_milestones=[2] * 9), "beacon", **SPEC)
    # A_ep = 0 (all score 0). seg 0 {10, 10, 9, 10}: mean 9.75; seg 1 {10, 10, 0 (C's tail)}: mean 20/3
    np.testing.assert_allclose(got, [0.25, 10 - 20 / 3, 0.0, 0.25, 10 - 20 / 3, 0.0, 9 - 9.75, 0.25, -20 / 3],
                               atol=ATOL)


def test_task_without_walkthrough_is_segment_zero_with_zero_reward():
    rows = [("A", 0, 0.0, True, False), ("A", 1, 10.0, True, False), ("B", 0, 0.0, True, False)]
    st, _ = canonical(table(rows, n_milestones=[0] * 3))
    seg, done, _ = milestone_segments(st)
    np.testing.assert_array_equal(seg, [0, 0, 0])
    assert not done.any()
    # all step rewards 0 → tie → the segment term is 0 and A = A_ep (mean_norm: score − mean)
    got = compute_advantages(table(rows, n_milestones=[0] * 3), "beacon", **SPEC)
    np.testing.assert_allclose(got, [10 - 20 / 3, 10 - 20 / 3, -20 / 3], atol=ATOL)


def test_all_false_milestones_give_the_episode_term_alone():
    tb = table(ROWS_156, milestone=True)
    none = dataclasses.replace(tb, milestone=np.zeros(len(tb), bool))
    got = compute_advantages(none, "beacon", **SPEC)
    # every row is tail segment 0 with step 0, except B t1 whose penalty gives −0.1: mean −0.1/12
    a_ep = np.array([r[2] for r in WANT_156]) - EP_SUM / 12
    step = np.where(np.arange(12) == 6, -0.1, 0.0)
    np.testing.assert_allclose(got, a_ep + (step + 0.1 / 12), atol=ATOL)
    np.testing.assert_allclose(got, compute_advantages(none, "grpo_mean") + (step + 0.1 / 12), atol=ATOL)


def test_missing_milestone_column_is_refused():
    with pytest.raises(ValueError, match="milestone"):
        compute_advantages(table(ROWS_156, milestone=False), "beacon")


def test_same_milestones_in_same_steps_tie_to_zero():
    # §15.5 "all rollouts reach the same milestones in the same number of steps → ties → 0": exact when
    # every turn completes a milestone (one-turn segments: every member of a group is R_ms)
    rows = [(e, t, 10.0 if t == 2 else 0.0, True, True) for e in "ABCD" for t in range(3)]
    for mode in ("mean_norm", "mean_std_norm"):
        np.testing.assert_array_equal(compute_advantages(table(rows), "beacon", **{**SPEC, "mode": mode}),
                                      np.zeros(12))
    # with a two-turn segment the rollouts still agree, but the segment's own turns differ by γ_m:
    # segment 1 = {t1: 9, t2: 10} × 4, mean 9.5 → −0.5 / +0.5, the same in every rollout (the §15.3
    # formula; the §15.5 sentence holds for the comparison *between* rollouts only)
    rows = [(e, t, 10.0 if t == 2 else 0.0, True, t in (0, 2)) for e in "ABCD" for t in range(3)]
    np.testing.assert_allclose(compute_advantages(table(rows), "beacon", **SPEC), [0.0, -0.5, 0.5] * 4, atol=ATOL)


def test_singletons_step_zero_episode_kept():
    rows = [("A", 0, 10.0, True, True)]
    got = compute_advantages(table(rows), "beacon", **{**SPEC, "mode": "mean_std_norm"})
    np.testing.assert_allclose(got, [10.0 / (1 + EPS)], atol=ATOL)
    np.testing.assert_allclose(compute_advantages(table(rows), "beacon", **SPEC), [10.0], atol=ATOL)


def test_invalid_penalty_hits_only_its_own_row():
    rows = [("A", 0, 0.0, True, False), ("A", 1, 0.0, False, False), ("A", 2, 10.0, True, True),
            ("B", 0, 0.0, True, False), ("B", 1, 0.0, True, False), ("B", 2, 10.0, True, True)]
    b = explain_advantages(table(rows), "beacon", **SPEC)
    np.testing.assert_allclose(b.extras["step reward"], [8.1, 9.0 - 0.1, 10.0, 8.1, 9.0, 10.0], atol=ATOL)


def test_failed_and_untrainable_rows_get_zero_and_stay_out_of_statistics():
    ok = [True] * 5 + [False] * 4 + [True] * 3  # B failed (env error)
    trainable = [True] * 11 + [False]
    got = compute_advantages(table(ROWS_156, episode_ok=ok, trainable=trainable), "beacon", **SPEC)
    assert np.all(got[5:9] == 0.0) and got[11] == 0.0
    keep = np.array(ok) & np.array(trainable)
    # the same as the table without those rows' statistics: reference on the eligible rows only
    want = reference_beacon(table(ROWS_156, episode_ok=ok, trainable=trainable), **SPEC)
    np.testing.assert_allclose(got, want, atol=ATOL)
    # eligible: A ×5 (score 10), C t0, t1 (0). A_ep mean 50/7; seg 0 {9, 10, 0, 0} mean 4.75;
    # seg 1 {A t2} singleton → 0 (B's tail is out); seg 2 {9, 10} mean 9.5
    a, c = 10 - 50 / 7, -50 / 7
    want_hand = [a + 9 - 4.75, a + 10 - 4.75, a, a - 0.5, a + 0.5, 0, 0, 0, 0, c - 4.75, c - 4.75, 0]
    np.testing.assert_allclose(got, want_hand, atol=ATOL)
    assert keep.sum() == 7


def test_row_order_and_groups_independent():
    tb = table(ROWS_156 + [(f"{e}2", t, r, v, m) for e, t, r, v, m in ROWS_156], group=[0] * 12 + [1] * 12)
    out = compute_advantages(tb, "beacon")
    np.testing.assert_allclose(out[:12], out[12:], atol=1e-12)
    for seed in range(5):
        perm = np.random.default_rng(seed).permutation(24)
        np.testing.assert_array_equal(compute_advantages(tb.take(perm), "beacon"), out[perm])


def test_vectorised_matches_reference_with_n_milestones():
    for seed in range(30):
        tb = random_table(np.random.default_rng(seed))
        for kw in ({}, SPEC, {"mode": "mean_std_norm", "stats_over": "trajectories"}):
            np.testing.assert_allclose(compute_advantages(tb, "beacon", **kw), reference_beacon(tb, **kw),
                                       atol=1e-9, rtol=1e-9)


def test_from_episodes_reads_turn_info():
    turns = [Turn(run_id="r", episode_id=0, group_id=0, t=t, observation="o", anchor_obs="o", action="a",
                  action_valid=True, reward=0.0, info={"milestone": t == 1, "n_milestones": 2} if t < 2 else {})
             for t in range(3)]
    tb = TurnTable.from_episodes([Episode(episode_id=0, group_id=0, env_id="x", task_id="t", seed=0, turns=turns)])
    np.testing.assert_array_equal(tb.milestone, [False, True, False])
    np.testing.assert_array_equal(tb.n_milestones, [2, 2, -1])
    plain = [dataclasses.replace(tr, info={}) for tr in turns]
    tb = TurnTable.from_episodes([Episode(episode_id=0, group_id=0, env_id="x", task_id="t", seed=0, turns=plain)])
    np.testing.assert_array_equal(tb.milestone, [False] * 3)
    assert tb.n_milestones is None

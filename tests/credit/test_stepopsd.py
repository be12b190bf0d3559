"""StepOPSD (ALGORITHMS.md §18; arXiv 2605.27140): the worked example of §18.7 (W and Ã at two
settings, the token variant, fed through the spec's CSR ``gap_offsets``), the edge cases of
§18.6, λ = 0 is GRPO byte for byte, sign and bounds over random tables, ``gaps_from_csr``'s
checks, the per-token output for the update and the breakdown. The λ schedule of §18.7 is the
config's (trainer), not tested here."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from credit_tables import PART3_ROWS, part3_row, make_table, random_table

from agentrl.credit import (compute_advantages, estimator_params, explain_advantages, gaps_from_csr, get_estimator,
                            stepopsd_advantages)
from agentrl.credit.stepopsd import span_token_advantages, token_weights
from agentrl.types import Turn, TurnTable

EPS = 1e-6
TOL = 6e-7  # the spec prints 6 decimals


ROWS = PART3_ROWS  # §17.7 and §18.7 share the batch
row = part3_row
# §18.7's token gaps, concatenated in row order, and the spec's CSR offsets
GAP_VALUES = [0.8, 0.1, -0.2, 0.05, 0.3, 0.2, 0.1, -1.5, -0.4, 0.3, 0, 0, -0.6, 1.2, 0.9, -0.5, 0.2, 0.4, -0.3,
              0.6, 0.6]
GAP_OFFSETS = [0, 3, 5, 7, 10, 10, 12, 13, 15, 17, 18, 19, 21]
A_GRPO = [0.724556, 0.724556, -1.201174, -1.220431, -1.201174, 0.724556, 0.724556, 0.724556, 0, 0, 0, 0]
# (λ, α) -> (W, Ã); P and Q (A = 0): Ã = 0 and W = 1 (sign(0) = 0 gives w = 1)
WANT = {
    (0.2, 0.05): ([1.016653, 1.037497, 0.950021, 1.016667, 1, 1, 0.95, 1.05, 1, 1, 1, 1],
                  [0.726969, 0.729990, -1.189167, -1.224499, -1.201174, 0.724556, 0.717310, 0.731801, 0, 0, 0, 0]),
    (1.0, 0.5): ([1.110080, 1.086940, 0.925187, 1.182830, 1, 1, 0.708687, 1.460950, 1, 1, 1, 1],
                 [0.804315, 0.787549, -1.111310, -1.443563, -1.201174, 0.724556, 0.513484, 1.058540, 0, 0, 0, 0]),
}
KW = dict(mode="mean_std_norm", stats_over="steps", c_inv=0.1)


def batch(gap=None, rows=ROWS, **kw) -> TurnTable:
    gap = gaps_from_csr(np.array(GAP_VALUES), np.array(GAP_OFFSETS, dtype=np.int64)) if gap is None else gap
    return make_table(rows, scores={"gap": gap}, **kw)


def test_gaps_from_csr_builds_the_padded_matrix():
    gap = gaps_from_csr(np.array(GAP_VALUES), np.array(GAP_OFFSETS, dtype=np.int64))
    assert gap.shape == (12, 3) and gap.dtype == np.float64
    np.testing.assert_array_equal(gap[0], [0.8, 0.1, -0.2])
    np.testing.assert_array_equal(gap[1], [0.05, 0.3, np.nan])
    assert np.isnan(gap[4]).all()  # Y t2: an empty range, not scored
    np.testing.assert_array_equal(gap[11], [0.6, 0.6, np.nan])
    # the rows' non-NaN entries, concatenated, are gap_values again
    np.testing.assert_array_equal(gap[~np.isnan(gap)], GAP_VALUES)
    assert gaps_from_csr(np.zeros(0), np.zeros(1, np.int64)).shape == (0, 1)
    none = gaps_from_csr(np.zeros(0), np.zeros(4, np.int64))  # three rows, nothing scored: L = 1, all NaN
    assert none.shape == (3, 1) and np.isnan(none).all()


@pytest.mark.parametrize("values, offsets, match", [
    ([1.0, 2.0], [1, 2], r"gap_offsets\[0\] must be 0"),
    ([1.0, 2.0], [0, 2, 1, 2], r"non-decreasing: gap_offsets\[1\] = 2 > gap_offsets\[2\] = 1"),
    ([1.0, 2.0], [0, 1], r"must end at len\(gap_values\) = 2, got 1"),
    ([1.0, 2.0], [0, 1, 3], r"must end at len\(gap_values\) = 2, got 3"),
    ([1.0, 2.0], [], r"int64\[N\+1\] \(1-D, at least one entry\)"),
    ([1.0, 2.0], [[0, 2]], r"int64\[N\+1\]"),
    ([1.0, 2.0], [0.0, 2.0], "must be integers"),
    ([[1.0, 2.0]], [0, 2], r"gap_values must be float64\[M\]"),
    ([1.0, np.nan], [0, 2], "gap_values has NaN at index 1"),
])
def test_gaps_from_csr_checks(values, offsets, match):
    offs = np.array(offsets) if offsets and isinstance(offsets[0], float) else np.array(offsets, dtype=np.int64)
    with pytest.raises(ValueError, match=match):
        gaps_from_csr(np.array(values), offs)


@pytest.mark.parametrize("lam, alpha", list(WANT))
def test_worked_example(lam, alpha):
    tb = batch()
    res = stepopsd_advantages(tb, lambda_mix=lam, alpha_clip=alpha, **KW)
    want_w, want_a = WANT[(lam, alpha)]
    np.testing.assert_allclose(res.grpo, A_GRPO, atol=TOL, rtol=0)
    np.testing.assert_allclose(res.budget, want_w, atol=TOL, rtol=0)
    np.testing.assert_allclose(res.step, want_a, atol=TOL, rtol=0)
    out = compute_advantages(tb, "stepopsd", lambda_mix=lam, alpha_clip=alpha, **KW)
    np.testing.assert_array_equal(out, res.step)
    np.testing.assert_array_equal(res.grpo, compute_advantages(tb, "grpo"))
    assert res.budget[4] == 1.0 and res.step[4] == res.grpo[4]  # Y t2: not scored, W = 1
    np.testing.assert_array_equal(res.step[8:], 0.0)


def test_worked_example_defaults_and_hand_check():
    tb = batch()
    np.testing.assert_array_equal(compute_advantages(tb, "stepopsd"),
                                  compute_advantages(tb, "stepopsd", lambda_mix=0.2, alpha_clip=0.05, **KW))
    # X t0 (A > 0): raw weights 2σ(0.8) = 1.379949, 2σ(0.1) = 1.049958, 2σ(−0.2) = 0.900332
    gap = tb.scores["gap"]
    raw, _ = token_weights(gap[:1], np.array([1.0]), 1.0)
    np.testing.assert_allclose(raw[0], [1.379949, 1.049958, 0.900332], atol=5e-7)
    w, W = token_weights(gap[:1], np.array([1.0]), 0.05)
    np.testing.assert_allclose(w[0], [1.05, 1.049958, 0.95], atol=5e-7)
    np.testing.assert_allclose(0.724556 * (0.8 + 0.2 * W[0]), 0.726969, atol=TOL)
    # Y t1 (A < 0, the sign flips): 2σ(1.5), 2σ(0.4) clip to 1.05; 2σ(−0.3) clips to 0.95. (The spec's hand
    # check prints 2σ(−0.3) = 0.851048; 2/(1 + e^0.3) = 0.851115. Clipped either way, W is unchanged.)
    raw, _ = token_weights(gap[3:4], np.array([-1.0]), 1.0)
    np.testing.assert_allclose(raw[0, 2], 2 / (1 + np.exp(0.3)), atol=1e-15)
    np.testing.assert_allclose(raw[0, 2], 0.851115, atol=5e-7)
    w, _ = token_weights(gap[3:4], np.array([-1.0]), 0.05)
    np.testing.assert_allclose(w[0], [1.05, 1.05, 0.95], atol=1e-12)


def test_token_variant():
    res = stepopsd_advantages(batch(), lambda_mix=1.0, alpha_clip=0.5, granularity="token", **KW)
    np.testing.assert_allclose(res.token[0], [0.999850, 0.760754, 0.652341], atol=TOL, rtol=0)
    np.testing.assert_allclose(res.token[3], [-1.830647, -1.461314, -1.038727], atol=TOL, rtol=0)
    np.testing.assert_allclose(res.token[7], [1.086834, 1.030245], atol=TOL, rtol=0)
    np.testing.assert_allclose(np.mean(res.token[0]), 0.804315, atol=TOL)
    assert res.token[4].size == 0 and [t.size for t in res.token] == list(np.diff(GAP_OFFSETS))
    for i, tok in enumerate(res.token):  # the mean over the scored tokens is the step value
        if tok.size:
            np.testing.assert_allclose(tok.mean(), res.step[i], atol=1e-12)


def test_lambda_zero_is_grpo_byte_for_byte():
    tables = [batch()] + [random_table(np.random.default_rng(s)) for s in range(20)]
    for tb in tables:
        for kw in ({}, {"mode": "mean_norm"}, {"stats_over": "trajectories"}, {"c_inv": 0.0, "stats_over": "episodes"}):
            for alpha in (0.05, 1.0):
                out = compute_advantages(tb, "stepopsd", lambda_mix=0.0, alpha_clip=alpha, **kw)
                assert out.tobytes() == compute_advantages(tb, "grpo", **kw).tobytes()


def test_sign_kept_and_bounds_over_random_tables():
    rng = np.random.default_rng(7)
    for seed in range(40):
        tb = random_table(np.random.default_rng(seed))
        lam, alpha = float(rng.uniform(0, 1)), float(rng.uniform(0, 1))
        kw = {"mode": ("mean_std_norm", "mean_norm")[seed % 2]}
        a = compute_advantages(tb, "grpo", **kw)
        out = compute_advantages(tb, "stepopsd", lambda_mix=lam, alpha_clip=alpha, **kw)
        np.testing.assert_array_equal(np.sign(out), np.sign(a))
        np.testing.assert_array_equal(out[a == 0.0], 0.0)
        nz = a != 0.0
        ratio = out[nz] / a[nz]
        assert np.all(ratio >= 1 - lam * alpha - 1e-12) and np.all(ratio <= 1 + lam * alpha + 1e-12)
        res = stepopsd_advantages(tb, lambda_mix=lam, alpha_clip=alpha, **kw)
        assert np.all((res.budget >= 1 - alpha - 1e-12) & (res.budget <= 1 + alpha + 1e-12))
        for i, tok in enumerate(res.token):
            if tok.size:
                np.testing.assert_allclose(tok.mean(), res.step[i], atol=1e-12)
                assert np.all(np.sign(tok) == np.sign(a[i]))


def test_all_success_or_all_fail_group_gets_nothing_to_shape():
    # §18.6: a tie gives A = 0 and so Ã = 0 whatever the gaps (contrast OPRL, §17.6)
    rows = [row("F", e, t) for e in ("a", "b") for t in range(2)] + \
           [row("W", e, t, 10.0 * (t == 1), done=int(t == 1)) for e in ("c", "d") for t in range(2)]
    gap = np.full((8, 2), 2.0)
    out = compute_advantages(batch(gap, rows), "stepopsd", lambda_mix=1.0, alpha_clip=0.5)
    np.testing.assert_array_equal(out, np.zeros(8))
    # with an invalid action an all-fail group has A ≠ 0: negative on the penalised row, positive on the
    # others; they are shaped with the sign kept
    rows = [row("F", "a", 0), row("F", "a", 1, valid=0), row("F", "b", 0), row("F", "b", 1)]
    tb = batch(np.full((4, 1), 1.0), rows)
    a = compute_advantages(tb, "grpo")
    out = compute_advantages(tb, "stepopsd", lambda_mix=1.0, alpha_clip=0.5)
    assert a[1] < 0 and np.all(a[[0, 2, 3]] > 0)
    np.testing.assert_array_equal(np.sign(out), np.sign(a))
    # Δ > 0 (hindsight makes the tokens likelier): less blame on the penalised row, more credit on the others
    assert a[1] < out[1] < 0 and np.all(out[[0, 2, 3]] > a[[0, 2, 3]])
    np.testing.assert_allclose(out, a * np.where(a > 0, 2 / (1 + np.exp(-1.0)), 2 / (1 + np.exp(1.0))), atol=1e-12)


def test_unscored_row_has_budget_one():
    gap = batch().scores["gap"].copy()
    gap[0] = np.nan  # X t0 not scored (an empty completion)
    res = stepopsd_advantages(batch(gap), lambda_mix=1.0, alpha_clip=0.5)
    assert res.budget[0] == 1.0 and res.step[0] == res.grpo[0] and res.token[0].size == 0


def test_singleton_uid_keeps_grpo():
    one = batch(np.array([[3.0, -1.0]]), [row("S", "e", 0, 3.0, done=1)])
    np.testing.assert_array_equal(compute_advantages(one, "stepopsd"), compute_advantages(one, "grpo"))
    res = stepopsd_advantages(one, lambda_mix=0.5, alpha_clip=0.5)
    np.testing.assert_allclose(res.step, res.grpo * (0.5 + 0.5 * res.budget), atol=1e-15)
    np.testing.assert_allclose(res.grpo, [3 / (1 + EPS)], atol=1e-12)


def test_failed_and_untrainable_rows_get_zero_and_their_gaps_are_ignored():
    ok = [True] * 12
    ok[2:5] = [False] * 3  # Y failed (not scored)
    train = np.ones(12, bool)
    train[6] = False
    tb = batch(episode_ok=ok, trainable=list(train))
    out = compute_advantages(tb, "stepopsd", lambda_mix=1.0, alpha_clip=0.5)
    np.testing.assert_array_equal(out[[2, 3, 4, 6]], 0.0)
    gap = tb.scores["gap"].copy()
    gap[[2, 3, 4, 6]] = 9.0
    moved = dataclasses.replace(tb, scores={"gap": gap})
    np.testing.assert_array_equal(compute_advantages(moved, "stepopsd", lambda_mix=1.0, alpha_clip=0.5), out)
    np.testing.assert_array_equal(compute_advantages(tb, "grpo")[[2, 3, 4, 6]], 0.0)


def test_row_order_is_irrelevant():
    tb = batch()
    for seed in range(5):
        perm = np.random.default_rng(seed).permutation(len(tb))
        res, base = stepopsd_advantages(tb.take(perm), lambda_mix=1.0, alpha_clip=0.5), \
            stepopsd_advantages(tb, lambda_mix=1.0, alpha_clip=0.5)
        np.testing.assert_array_equal(res.step, base.step[perm])
        for i, j in enumerate(perm):
            np.testing.assert_array_equal(res.token[i], base.token[j])


def test_column_and_hyperparameter_checks():
    tb = batch()
    with pytest.raises(ValueError, match=r"lacks column.*gap"):
        compute_advantages(dataclasses.replace(tb, scores={}), "stepopsd")
    with pytest.raises(ValueError, match=r"float64\[N, L\] with L >= 1"):
        compute_advantages(dataclasses.replace(tb, scores={"gap": np.zeros(len(tb))}), "stepopsd")
    with pytest.raises(ValueError, match=r"float64\[N, L\] with L >= 1"):
        compute_advantages(dataclasses.replace(tb, scores={"gap": np.zeros((len(tb), 0))}), "stepopsd")
    for key, bad in (("lambda_mix", 1.5), ("lambda_mix", -0.1), ("alpha_clip", 1.2), ("alpha_clip", -0.5)):
        with pytest.raises(ValueError, match=f"{key}={bad} is out of range"):
            compute_advantages(tb, "stepopsd", **{key: bad})
    with pytest.raises(ValueError, match="not one of"):
        compute_advantages(tb, "stepopsd", granularity="span")
    with pytest.raises(ValueError, match="not one of"):
        compute_advantages(tb, "stepopsd", mode="rloo")


def test_registration():
    assert estimator_params("stepopsd") == dict(lambda_mix=0.2, alpha_clip=0.05, granularity="step",
                                                mode="mean_std_norm", stats_over="steps", c_inv=0.1, eps=EPS)
    spec = get_estimator("stepopsd")
    assert spec.requires == ("gap",) and spec.declares.scorers == ("hindsight",) and spec.breakdown is not None
    assert spec.declares.spans.names == ("completion",) and spec.declares.spans.token_advantages is span_token_advantages
    assert spec.choices["granularity"] == ("step", "token") and spec.groups_by_task


def test_breakdown_adds_up():
    for kw in ({}, {"lambda_mix": 1.0, "alpha_clip": 0.5}, {"lambda_mix": 0.0}, {"mode": "mean_norm"}):
        for tb in [batch()] + [random_table(np.random.default_rng(s)) for s in range(6)]:
            b = explain_advantages(tb, "stepopsd", **kw)
            assert [t.name for t in b.terms] == ["episode", "shaping"]
            np.testing.assert_allclose(b.total(), compute_advantages(tb, "stepopsd", **kw), atol=1e-12, rtol=0)
            np.testing.assert_array_equal(b.terms[0].value, compute_advantages(tb, "grpo", **{
                k: v for k, v in kw.items() if k in ("mode",)}))
    b = explain_advantages(batch(), "stepopsd", lambda_mix=1.0, alpha_clip=0.5)
    np.testing.assert_allclose(b.extras["budget W"], WANT[(1.0, 0.5)][0], atol=TOL)
    np.testing.assert_array_equal(b.terms[1].weight, 1.0)


def _turn(i: int, c: int) -> Turn:
    return Turn(run_id="r", episode_id=0, group_id=0, t=i, observation="o", anchor_obs="o", action="a",
                action_valid=True, reward=0.0, turn_id=i, completion_ids=np.arange(c, dtype=np.int32))


def _with_spans(tb: TurnTable, spans: dict) -> TurnTable:
    col = np.full((len(tb), 2), np.nan)
    for row, sp in spans.items():
        col[row] = sp
    return dataclasses.replace(tb, scores={**tb.scores, "gap_span": col})


def test_span_token_advantages_lay_the_token_variant_on_the_completion():
    tb = _with_spans(batch(), {0: (1, 4), 7: (4, 6)})
    rows = np.array([0, 3, 4, 7], dtype=np.int64)
    turns = [_turn(0, 5), _turn(3, 3), _turn(4, 2), _turn(7, 6)]
    kw = {"lambda_mix": 1.0, "alpha_clip": 0.5}
    res = stepopsd_advantages(tb, **kw)
    advs, masks = span_token_advantages(tb, rows, turns, kw)  # granularity "step": the row's Ã on every token
    assert masks == [None] * 4
    for a, r, t in zip(advs, rows, turns):
        assert a.shape == (t.completion_ids.size,)
        np.testing.assert_array_equal(a, res.step[r])
    advs, _ = span_token_advantages(tb, rows, turns, {**kw, "granularity": "token"})
    np.testing.assert_array_equal(advs[0], [res.step[0], *res.token[0], res.step[0]])
    np.testing.assert_array_equal(advs[1], res.token[3])  # no span recorded: the whole completion
    np.testing.assert_array_equal(advs[2], [res.step[4]] * 2)  # not scored: Ã everywhere
    np.testing.assert_array_equal(advs[3], [res.step[7]] * 4 + list(res.token[7]))
    with pytest.raises(ValueError, match="has 3 token gaps but its scored segment is \\[0, 4\\) of 4"):
        span_token_advantages(batch(), rows[:1], [_turn(0, 4)], {**kw, "granularity": "token"})

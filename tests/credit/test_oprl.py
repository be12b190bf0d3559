"""OPRL / iStar (ALGORITHMS.md §17; arXiv 2509.19199): the worked example of §17.7 to the printed
digits (every column), the edge cases of §17.6, the three modes, ``process_only`` and
``batch_scale``, the column checks, the registration and the breakdown. The PRM's DPO loss of
§17.7 is the trainer's (the ``prm`` scorer), not tested here."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from credit_tables import PART3_ROWS, part3_row, make_table, random_table

from agentrl.credit import compute_advantages, estimator_params, explain_advantages, get_estimator
from agentrl.credit._segments import eligible
from agentrl.credit.oprl import step_rewards
from agentrl.types import TurnTable

EPS = 1e-6
TOL = 6e-7  # the spec prints 6 decimals


ROWS = PART3_ROWS  # §17.7 and §18.7 share the batch
row = part3_row
ELL = [6, 2, -4, -10, 1, 0.5, -2, 3, -1, 2, -3, -1]
# the spec's table, row by row: r, r̃, score, A_E, A_S, A (mean_std_norm), A (mean_norm), A (rloo)
WANT = np.array([
    (0.30, 0.599999, 10, 0.724556, 1.311245, 2.035800, 4.406249, 5.735713),
    (0.10, 0.200000, 10, 0.724556, 0.496491, 1.221047, 4.006250, 5.278571),
    (-0.20, -0.399999, 0, -1.201174, -0.725640, -1.926814, -6.593749, -10.407142),
    (-0.50, -0.999998, -0.1, -1.220431, -1.947771, -3.168202, -7.293748, -11.242855),
    (0.05, 0.100000, 0, -1.201174, 0.292802, -0.908372, -6.093750, -9.835715),
    (0.025, 0.050000, 10, 0.724556, 0.190958, 0.915514, 3.856250, 5.107143),
    (-0.10, -0.200000, 10, 0.724556, -0.318263, 0.406293, 3.606250, 4.821429),
    (0.15, 0.299999, 10, 0.724556, 0.700179, 1.424735, 4.106249, 5.392856),
    (-0.05, -0.100000, 0, 0, -0.121267, -0.121267, -0.025000, -0.033333),
    (0.10, 0.200000, 0, 0, 1.333939, 1.333939, 0.274999, 0.366666),
    (-0.15, -0.299999, 0, 0, -1.091405, -1.091405, -0.225000, -0.299999),
    (-0.05, -0.100000, 0, 0, -0.121267, -0.121267, -0.025000, -0.033333),
])
SPEC = dict(beta=0.05, step_advantage_w=1.0, c_inv=0.1, mode="mean_std_norm", stats_over="steps", batch_scale=True)


def batch(ell=ELL, rows=ROWS, **kw) -> TurnTable:
    return make_table(rows, scores={"prm_logratio": np.asarray(ell, dtype=np.float64)}, **kw)


def test_worked_example_every_column():
    tb = batch()
    r, rt = step_rewards(tb, eligible(tb), beta=0.05, batch_scale=True)
    np.testing.assert_allclose(r, WANT[:, 0], atol=1e-15)
    np.testing.assert_allclose(rt, WANT[:, 1], atol=TOL, rtol=0)
    b = explain_advantages(tb, "oprl", **SPEC)
    episode, step = b.terms
    assert (episode.name, step.name) == ("episode", "step")
    np.testing.assert_allclose(episode.x, WANT[:, 2], atol=1e-12)  # the outcome score
    np.testing.assert_allclose(episode.contribution, WANT[:, 3], atol=TOL, rtol=0)
    np.testing.assert_allclose(step.contribution, WANT[:, 4], atol=TOL, rtol=0)
    np.testing.assert_allclose(compute_advantages(tb, "oprl", **SPEC), WANT[:, 5], atol=TOL, rtol=0)
    for col, mode in ((6, "mean_norm"), (7, "rloo")):
        np.testing.assert_allclose(compute_advantages(tb, "oprl", **{**SPEC, "mode": mode}), WANT[:, col],
                                   atol=TOL, rtol=0)
    # defaults are the worked example's settings
    np.testing.assert_array_equal(compute_advantages(tb, "oprl"), compute_advantages(tb, "oprl", **SPEC))


def test_worked_example_hand_checks():
    tb = batch()
    step = explain_advantages(tb, "oprl").terms[1]
    # U's r̃: mean −0.043750, unbiased std 0.490944; X t0: 0.643749/0.490945 = 1.311245
    np.testing.assert_allclose(step.mean[0], -0.043750, atol=5e-7)
    np.testing.assert_allclose(step.std[0], 0.490944, atol=1e-6)
    assert step.size[0] == 8 and step.size[8] == 4
    # the A_E column equals GRPO for the same scores (§2.5 rows 0–7); V's A_E is 0 (tie)
    np.testing.assert_allclose(explain_advantages(tb, "oprl").terms[0].value, compute_advantages(tb, "grpo"),
                               atol=1e-15)
    # rloo: U's t = 0 scores {10, 0, 10}, mean 6.666667, so Y t1's A_E = 1.5·(−0.1 − 6.666667) = −10.15
    ep = explain_advantages(tb, "oprl", mode="rloo").terms[0]
    np.testing.assert_allclose(ep.contribution[3], 1.5 * (-0.1 - 20 / 3), atol=1e-12)
    np.testing.assert_allclose(ep.contribution[3], -10.15, atol=1e-12)
    np.testing.assert_allclose(ep.weight[:8], 1.5)
    np.testing.assert_array_equal(ep.size[:8], 3)


def test_all_fail_group_gets_step_credit_but_no_episode_credit():
    # §17.6: group V (all fail) has no outcome variance: A_E = 0 (tie), yet every turn gets A_S ≠ 0
    tb = batch()
    b = explain_advantages(tb, "oprl")
    v = slice(8, 12)
    np.testing.assert_array_equal(b.terms[0].value[v], 0.0)
    assert np.all(b.terms[1].value[v] != 0.0)
    assert np.all(compute_advantages(tb, "oprl")[v] != 0.0)
    # likewise an all-success group
    won = [row("W", "A", 0), row("W", "A", 1, 10.0, done=1), row("W", "B", 0, 10.0, done=1)]
    out = compute_advantages(batch([1.0, -2.0, 0.5], won), "oprl")
    assert np.all(out != 0.0)
    np.testing.assert_array_equal(explain_advantages(batch([1.0, -2.0, 0.5], won), "oprl").terms[0].value, 0.0)


def test_iteration_zero_gives_grpo():
    # §17.6: π_φ = π_θold, so ℓ = 0 everywhere: A_S = 0 (tie) and A is GRPO's advantage, byte for byte
    tb = batch(np.zeros(len(ROWS)))
    np.testing.assert_array_equal(compute_advantages(tb, "oprl"), compute_advantages(tb, "grpo"))
    np.testing.assert_array_equal(compute_advantages(tb, "oprl", mode="mean_norm"),
                                  compute_advantages(tb, "grpo", mode="mean_norm"))


def test_singletons():
    # a uid with a single step row: A_S = 0, A_E keeps the score (episode-level singleton)
    one = batch([7.0], [row("S", "e", 0, 3.0, done=1)])
    for mode, want in (("mean_std_norm", 3 / (1 + EPS)), ("mean_norm", 3.0), ("rloo", 3.0)):
        np.testing.assert_allclose(compute_advantages(one, "oprl", mode=mode), [want], atol=1e-12, rtol=0)
    np.testing.assert_array_equal(compute_advantages(one, "oprl", process_only=True), [0.0])
    # a uid with a single trajectory of two steps: A_S ≠ 0 (two step rows); A_E keeps the score where
    # one value per trajectory counts (rloo, trajectories) and ties where every step counts
    traj = [row("S", "e", 0), row("S", "e", 1, 3.0, done=1)]
    tb = batch([1.0, -1.0], traj)
    ep = {m: explain_advantages(tb, "oprl", mode=m, **kw).terms[0].contribution
          for m, kw in (("rloo", {}), ("mean_std_norm", {"stats_over": "trajectories"}), ("mean_norm", {}))}
    np.testing.assert_array_equal(ep["rloo"], [3.0, 3.0])
    np.testing.assert_allclose(ep["mean_std_norm"], [3 / (1 + EPS)] * 2, atol=1e-12)
    np.testing.assert_array_equal(ep["mean_norm"], [0.0, 0.0])
    assert np.all(compute_advantages(tb, "oprl", process_only=True) != 0.0)


def test_ties_give_exactly_zero_in_every_mode():
    # two identical failed trajectories with identical PRM scores per row: a tie in both terms
    rows = [row("T", e, t) for e in ("a", "b", "c") for t in range(2)]
    tb = batch([0.1] * 6, rows)
    for mode in ("mean_std_norm", "mean_norm", "rloo"):
        np.testing.assert_array_equal(compute_advantages(tb, "oprl", mode=mode), np.zeros(6))


def _perturb(tb: TurnTable, rows: np.ndarray, ell: float, reward: float | None = None) -> TurnTable:
    scores = {"prm_logratio": np.where(rows, ell, tb.scores["prm_logratio"])}
    return dataclasses.replace(tb, reward=tb.reward if reward is None else np.where(rows, reward, tb.reward),
                               scores=scores)


@pytest.mark.parametrize("mode", ["mean_std_norm", "mean_norm", "rloo"])
def test_failed_episode_rows_get_zero_and_enter_no_statistic(mode):
    # P5: a failed (not ok) episode in group U with a huge log-ratio: it gets 0 and moves neither the
    # batch maximum nor any group statistic
    rows = ROWS + [row("U", "F", 0), row("U", "F", 1, 10.0, done=1)]
    ok = [True] * len(ROWS) + [False, False]
    tb = batch(ELL + [0.0, 0.0], rows, episode_ok=ok)
    base = compute_advantages(tb, "oprl", mode=mode)
    np.testing.assert_array_equal(base[-2:], 0.0)
    np.testing.assert_array_equal(base[:-2], compute_advantages(batch(), "oprl", mode=mode))
    bad = np.arange(len(rows)) >= len(ROWS)
    for ell in (1e3, -1e3, np.nan):  # a failed episode's column is never read
        np.testing.assert_array_equal(compute_advantages(_perturb(tb, bad, ell, 99.0), "oprl", mode=mode), base)


@pytest.mark.parametrize("mode", ["mean_std_norm", "mean_norm", "rloo"])
def test_untrainable_rows_get_zero_and_enter_no_statistic(mode):
    # P6: Y's t2 is not trainable: it gets 0; its log-ratio (here the batch's largest) moves nothing
    # (its reward still counts in Y's episode reward, as in every estimator)
    train = np.ones(len(ROWS), bool)
    train[4] = False
    tb = batch(trainable=list(train))
    out = compute_advantages(tb, "oprl", mode=mode)
    assert out[4] == 0.0
    for ell in (50.0, -50.0):
        np.testing.assert_array_equal(compute_advantages(_perturb(tb, ~train, ell), "oprl", mode=mode), out)


def test_row_order_is_irrelevant():
    tb = batch()
    for seed in range(5):
        perm = np.random.default_rng(seed).permutation(len(tb))
        for mode in ("mean_std_norm", "mean_norm", "rloo"):
            np.testing.assert_array_equal(compute_advantages(tb.take(perm), "oprl", mode=mode),
                                          compute_advantages(tb, "oprl", mode=mode)[perm])


def test_process_only_returns_the_step_term_alone():
    tb = batch()
    for mode in ("mean_std_norm", "mean_norm", "rloo"):
        b = explain_advantages(tb, "oprl", mode=mode)
        a_s = b.terms[1].contribution  # w = 1
        for w in (1.0, 0.3):  # upstream use_process_only: A_S unweighted
            out = compute_advantages(tb, "oprl", mode=mode, process_only=True, step_advantage_w=w)
            np.testing.assert_allclose(out, a_s, atol=1e-15)
        assert [t.name for t in explain_advantages(tb, "oprl", mode=mode, process_only=True).terms] == ["step"]
    np.testing.assert_allclose(compute_advantages(tb, "oprl", process_only=True), WANT[:, 4], atol=TOL)


def test_step_advantage_w_weights_the_step_term():
    tb = batch()
    np.testing.assert_allclose(compute_advantages(tb, "oprl", step_advantage_w=0.5), WANT[:, 3] + 0.5 * WANT[:, 4],
                               atol=TOL)
    np.testing.assert_array_equal(compute_advantages(tb, "oprl", step_advantage_w=0.0), compute_advantages(tb, "grpo"))


def test_batch_scale():
    tb = batch()
    # mean_std_norm: the scale cancels except through eps
    np.testing.assert_allclose(compute_advantages(tb, "oprl", batch_scale=False), WANT[:, 5], atol=1e-5)
    assert not np.array_equal(compute_advantages(tb, "oprl", batch_scale=False), compute_advantages(tb, "oprl"))
    # mean_norm and rloo: A_S is in units of r without it (r̃ = r / (0.5 + 1e-6) with it)
    for mode in ("mean_norm", "rloo"):
        with_scale = explain_advantages(tb, "oprl", mode=mode).terms[1].contribution
        without = explain_advantages(tb, "oprl", mode=mode, batch_scale=False).terms[1].contribution
        np.testing.assert_allclose(without, with_scale * (0.5 + 1e-6), atol=1e-12)
    # with the batch scale β cancels (but for the 1e-6)
    np.testing.assert_allclose(compute_advantages(tb, "oprl", beta=0.5, mode="mean_norm"), WANT[:, 6], atol=1e-5)


def test_long_turns_reach_a_larger_reward():
    # ℓ is a sum over tokens: no per-token normalisation, the larger |ℓ| the larger |r̃|
    tb = batch()
    _, rt = step_rewards(tb, eligible(tb), beta=0.05, batch_scale=True)
    assert np.argmax(np.abs(rt)) == int(np.argmax(np.abs(ELL)))
    assert np.max(np.abs(rt)) < 1.0


def test_breakdown_adds_up_on_the_worked_example_and_random_tables():
    for kw in ({}, {"mode": "mean_norm"}, {"mode": "rloo"}, {"process_only": True}, {"step_advantage_w": 2.5},
               {"stats_over": "trajectories", "mode": "rloo"}):
        for tb in [batch()] + [random_table(np.random.default_rng(s)) for s in range(6)]:
            b = explain_advantages(tb, "oprl", **kw)
            np.testing.assert_allclose(b.total(), compute_advantages(tb, "oprl", **kw), atol=1e-12, rtol=0)
            assert set(b.extras) == {"prm log-ratio ℓ", "step reward r"}


def test_column_checks():
    tb = batch()
    no_col = dataclasses.replace(tb, scores={})
    with pytest.raises(ValueError, match=r"lacks column.*prm_logratio"):
        compute_advantages(no_col, "oprl")
    with pytest.raises(ValueError, match=r"float64\[N\]"):
        compute_advantages(dataclasses.replace(tb, scores={"prm_logratio": np.zeros((len(tb), 2))}), "oprl")
    ell = np.array(ELL, dtype=np.float64)
    ell[3] = np.nan
    with pytest.raises(ValueError, match="not finite on 1 eligible row"):
        compute_advantages(batch(ell), "oprl")


def test_registration_and_hyperparameter_checks():
    assert estimator_params("oprl") == dict(beta=0.05, step_advantage_w=1.0, mode="mean_std_norm", stats_over="steps",
                                            batch_scale=True, process_only=False, c_inv=0.1, eps=EPS)
    spec = get_estimator("oprl")
    assert spec.requires == ("prm_logratio",) and spec.declares.scorers == ("prm",) and spec.breakdown is not None
    assert spec.choices["mode"] == ("mean_std_norm", "mean_norm", "rloo") and spec.groups_by_task
    tb = batch()
    with pytest.raises(ValueError, match="not one of"):
        compute_advantages(tb, "oprl", mode="grpo")
    with pytest.raises(ValueError, match="not one of"):
        compute_advantages(tb, "oprl", stats_over="turns")
    for key in ("beta", "step_advantage_w", "c_inv"):
        with pytest.raises(ValueError, match=f"{key}=-1.0 is out of range"):
            compute_advantages(tb, "oprl", **{key: -1.0})
    with pytest.raises(ValueError, match=r"beta=1.5 is out of range: beta must be in \[0.0, 1.0\]"):
        compute_advantages(tb, "oprl", beta=1.5)  # the shared convention, the paper's β ∈ [0, 1]
    with pytest.raises(TypeError, match="must be a bool"):
        compute_advantages(tb, "oprl", batch_scale=1)


def test_empty_table():
    out = compute_advantages(batch().take(np.zeros(0, np.int64)), "oprl")
    assert out.shape == (0,) and out.dtype == np.float64

"""3SPO (ALGORITHMS.md §16): the §16.7 worked example (float64, hand values), the §16.5 edge cases,
invariants, and the store-side query of the per-state statistics over earlier iterations
(``agentrl.store.state_stats``) including resume-safety."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from agentrl.credit import compute_advantages, explain_advantages
from agentrl.credit.threespo import state_score
from agentrl.store import TurnStore, state_success_stats, with_state_stats
from agentrl.types import Episode, EpisodeStatus, Turn, TurnTable

EPS = 1e-6
# §16.7: prior stats s0 (11, 3), s1 (4, 2), s3 (5, 0), s4 (10, 0); t = 12; one uid.
PRIOR = {"s0": (11, 3), "s1": (4, 2), "s3": (5, 0), "s4": (10, 0)}
# (episode, t, anchor, next anchor, reward, valid): X succeeds, Y fails (truncated)
ROWS = [("X", 0, "s0", "s1", 0.0, 1), ("X", 1, "s1", "goal", 10.0, 1), ("Y", 0, "s0", "s0", 0.0, 0),
        ("Y", 1, "s0", "s3", 0.0, 1), ("Y", 2, "s3", "s4", 0.0, 1)]


def _table(rows=ROWS, prior=PRIOR, t=12, group=None, ok=None, trainable=None) -> TurnTable:
    vocab: dict[str, int] = {}
    key = lambda s: vocab.setdefault(s, len(vocab))  # noqa: E731
    anchor, nxt = [key(r[2]) for r in rows], [key(r[3]) for r in rows]
    eps = sorted({r[0] for r in rows})
    n = len(rows)
    last = [i == max(j for j, q in enumerate(rows) if q[0] == r[0]) for i, r in enumerate(rows)]
    stats = [[*prior.get(r[2], (0, 0)), *prior.get(r[3], (0, 0)), t] for r in rows]
    return TurnTable(group=group or [0] * n, episode=[eps.index(r[0]) for r in rows], t=[r[1] for r in rows],
                     reward=[r[4] for r in rows], terminated=[lst and r[4] > 0 for lst, r in zip(last, rows)],
                     truncated=[lst and r[4] <= 0 for lst, r in zip(last, rows)], action_valid=[r[5] for r in rows],
                     anchor_key=anchor, next_anchor_key=nxt, action_key=[0] * n,
                     parent=[i - 1 if r[1] else -1 for i, r in enumerate(rows)], episode_ok=ok or [True] * n,
                     trainable=trainable or [True] * n, turn_id=list(range(n)), anchor_vocab=tuple(vocab),
                     state_stats=stats)


# -- §16.7 worked example -----------------------------------------------------------------------

def test_worked_example_hand_values_of_w_and_s():
    w = lambda n: 0.5 * math.exp(-0.1 * n)  # noqa: E731
    assert (round(w(11), 6), round(w(4), 6), round(w(5), 6)) == (0.166436, 0.335160, 0.303265)
    s = state_score(np.array([11, 4, 5, 10, 0]), np.array([3, 2, 0, 0, 0]), np.full(5, 12), alpha=1.0, xi=10.0,
                    zeta=0.1, eps=EPS)
    np.testing.assert_allclose(s, [12 ** (-3 / (11 + EPS)), 12 ** (-2 / (4 + EPS)), 1.0, 0.0, 1.0], atol=1e-12, rtol=0)
    # the spec's hand check prints S(s0) = 12^(−3/11) = 0.507784; the value is 0.5077826 (a rounding slip of
    # 1.4e-6 in the text: its R and A columns, which use the exact value, are reproduced below)
    np.testing.assert_allclose(s[:2], [0.507783, 0.288675], atol=5e-7)


@pytest.mark.parametrize("alpha,r_want,a_want", [
    (1.0, [0.239522, 5.217905, -0.1, 0.002249, 0.5], [0.192265, 0.0, -0.147257, -0.045008, 0.0]),
    (50.0, [0.166436, 5.170320, -0.1, -0.167129, 0.5], [0.2, 0.0, -0.066436, -0.133564, 0.0]),
])
def test_worked_example_table(alpha, r_want, a_want):
    tb = _table()
    adv = compute_advantages(tb, "threespo", alpha=alpha)
    r = explain_advantages(tb, "threespo", alpha=alpha).extras["step reward R"]
    np.testing.assert_allclose(r, r_want, atol=1.5e-6, rtol=0)  # the table prints 6 decimals
    np.testing.assert_allclose(adv, a_want, atol=1.5e-6, rtol=0)
    # exact float64 (1e-9): the closed forms of §16.3 written out by hand for each row
    w0, w1, w3 = 0.5 * math.exp(-1.1), 0.5 * math.exp(-0.4), 0.5 * math.exp(-0.5)
    s0, s1 = math.exp(-alpha * math.log(12) * 3 / (11 + EPS)), math.exp(-alpha * math.log(12) * 2 / (4 + EPS))
    hand = [w0 + (0.5 - w0) * (s0 - s1), w1 + (0.5 - w1) * (s1 - 1.0) + 5.0, -0.1, w0 + (0.5 - w0) * (s0 - 1.0),
            w3 + (0.5 - w3) * (1.0 - 0.0)]
    np.testing.assert_allclose(r, hand, atol=1e-9, rtol=0)
    mean = (hand[0] + hand[2] + hand[3]) / 3  # group (U, s0) = {X t0, Y t0, Y t1}, mean_norm
    np.testing.assert_allclose(adv, [hand[0] - mean, 0.0, hand[2] - mean, hand[3] - mean, 0.0], atol=1e-9, rtol=0)


def test_worked_example_defaults_are_the_alpha_50_column():
    # defaults: α 50 (the scripts), ξ 10, ζ 0.1, ω_k 0.1, mean_norm, c_inv 0.1: S(s0), S(s1) ≈ 0
    b = explain_advantages(_table(), "threespo")
    assert b.extras["S(s_t)"][0] < 1e-14 and b.extras["S(s_t)"][1] < 1e-14
    np.testing.assert_allclose(b.total(), compute_advantages(_table(), "threespo", alpha=50.0), atol=1e-12, rtol=0)
    w0 = 0.5 * math.exp(-1.1)
    assert b.total()[0] == pytest.approx(w0 - (w0 - 0.1 + 2 * w0 - 0.5) / 3, abs=1e-9) == pytest.approx(0.2, abs=1e-9)


# -- §16.5 edge cases -------------------------------------------------------------------------

def _r(tb, **kw):
    return explain_advantages(tb, "threespo", **kw).extras["step reward R"]


def test_unseen_states_score_one_and_finishing_costs_at_most_zero_before_the_success_term():
    tb = _table([("X", 0, "a", "b", 0.0, 1), ("X", 1, "b", "end", 10.0, 1)], prior={"a": (3, 0), "b": (3, 0)}, t=4)
    b = explain_advantages(tb, "threespo", alpha=1.0)
    np.testing.assert_array_equal(b.extras["S(s_t+1)"], [1.0, 1.0])  # b has rate 0 → 1; "end" is unseen → 1
    w = 0.5 * math.exp(-0.3)
    np.testing.assert_allclose(b.extras["step reward R"], [w, w + (0.5 - w) * (1.0 - 1.0) + 5.0], atol=1e-12)


def test_hopeless_state_scores_zero_and_a_promising_rate_keeps_it_alive():
    s = state_score(np.array([10, 10, 10, 9]), np.array([0, 1, 2, 0]), np.full(4, 20), alpha=1.0, xi=10.0, zeta=0.1,
                    eps=EPS)
    # (10, 0): 10 failures ≥ ξ and rate 0 ≤ ζ → 0; (10, 1): 9 failures < ξ → alive;
    # (10, 2): rate 0.2 > ζ → alive; (9, 0): 9 failures < ξ → exp(0) = 1
    np.testing.assert_allclose(s, [0.0, 20 ** (-1 / (10 + EPS)), 20 ** (-2 / (10 + EPS)), 1.0], atol=1e-12, rtol=0)


def test_loop_gives_only_the_penalty():
    tb = _table([("X", 0, "a", "a", 0.0, 1), ("X", 1, "a", "a", 0.0, 0)], prior={"a": (5, 1)}, t=9)
    np.testing.assert_array_equal(_r(tb), [0.0, -0.1])


def test_singleton_anchor_groups_get_zero_and_the_episode_term_restores_a_signal():
    rows = [("X", 0, "a", "b", 10.0, 1), ("Y", 0, "c", "d", 0.0, 1)]
    tb = _table(rows, prior={})
    np.testing.assert_array_equal(compute_advantages(tb, "threespo"), [0.0, 0.0])
    got = compute_advantages(tb, "threespo", episode_advantage_w=0.5)
    np.testing.assert_allclose(got, [0.5 * 5.0, 0.5 * -5.0], atol=1e-12, rtol=0)  # EPI mean_norm: ±5


def test_anchor_groups_are_per_task_group_while_stats_are_global():
    rows = [("X", 0, "a", "b", 0.0, 1), ("Y", 0, "a", "a", 0.0, 1)]
    same = compute_advantages(_table(rows, prior={"a": (2, 0)}, t=5), "threespo")
    apart = compute_advantages(_table(rows, prior={"a": (2, 0)}, t=5, group=[0, 1]), "threespo")
    assert same[0] > 0 > same[1] and np.all(apart == 0.0)


def test_ties_give_exactly_zero_and_std_mode():
    rows = [(e, 0, "a", "b", 0.0, 1) for e in "XYZ"]
    np.testing.assert_array_equal(compute_advantages(_table(rows, prior={"a": (4, 1)}, t=9), "threespo",
                                                     mode="mean_std_norm"), [0.0, 0.0, 0.0])


# -- invariants -----------------------------------------------------------------------------

def test_failed_and_untrainable_rows_get_zero_and_move_no_baseline():
    base = _table()
    ok = [True, True, False, False, False]  # Y failed (env error): out of every statistic
    out = compute_advantages(_table(ok=ok), "threespo", alpha=1.0)
    np.testing.assert_array_equal(out, [0.0, 0.0, 0.0, 0.0, 0.0])  # X t0 alone in (U, s0) now
    untrain = compute_advantages(_table(trainable=[True, True, False, True, True]), "threespo", alpha=1.0)
    r = _r(base, alpha=1.0)
    mean = (r[0] + r[3]) / 2
    np.testing.assert_allclose(untrain, [r[0] - mean, 0.0, 0.0, r[3] - mean, 0.0], atol=1e-12, rtol=0)


def test_row_order_does_not_matter():
    tb = _table()
    out = compute_advantages(tb, "threespo", alpha=1.0)
    for seed in range(5):
        perm = np.random.default_rng(seed).permutation(len(tb))
        np.testing.assert_array_equal(compute_advantages(tb.take(perm), "threespo", alpha=1.0), out[perm])


def test_missing_or_inconsistent_stats_are_refused():
    tb = _table()
    with pytest.raises(ValueError, match="state_stats"):
        compute_advantages(dataclasses.replace(tb, state_stats=None), "threespo")
    bad = tb.state_stats.copy()
    bad[0, 1] = 12  # more successes than visits
    with pytest.raises(ValueError, match="inconsistent"):
        compute_advantages(dataclasses.replace(tb, state_stats=bad), "threespo")
    with pytest.raises(ValueError, match="shape"):
        dataclasses.replace(tb, state_stats=np.zeros((5, 4), np.int64))
    with pytest.raises(ValueError, match="alpha"):
        compute_advantages(tb, "threespo", alpha=-1.0)


# -- the store-side query (D-16) ------------------------------------------------------------

def _episode(eid: int, group: int, anchors: list[str], won: bool, version: int, *, end: str = "goal",
             invalid_at: int = -1, status=EpisodeStatus.OK, unscored: bool = False) -> Episode:
    n = len(anchors)
    turns = [Turn(run_id="", episode_id=eid, group_id=group, t=t, observation=a, anchor_obs=a, action=f"act {t}",
                  action_valid=t != invalid_at, reward=None if unscored else (10.0 if won and t == n - 1 else 0.0),
                  terminated=won and t == n - 1, truncated=not won and t == n - 1,
                  next_anchor_obs=anchors[t + 1] if t + 1 < n else end, prompt_ids=np.array([1, 2], np.int32),
                  completion_ids=np.array([3], np.int32), completion_logprobs=np.array([-0.5], np.float32),
                  policy_version=version)
             for t, a in enumerate(anchors)]
    return Episode(episode_id=eid, group_id=group, env_id="agentrl/Toy-v0", task_id=f"task-{group}", seed=group,
                   status=status, turns=turns)


def _iteration1() -> list[Episode]:
    return [_episode(0, 0, ["s0", "s1"], True, 0), _episode(1, 0, ["s0", "s3", "s4"], False, 0, end="s5"),
            _episode(2, 1, ["s0", "s0", "s1"], False, 0),  # other task, s0 twice: counted once
            _episode(3, 1, ["s1"], True, 0, status=EpisodeStatus.ENV_ERROR),  # not ok: never counted
            _episode(4, 1, ["s3"], False, 0, unscored=True)]  # unscored: not ok


def _iteration2() -> list[Episode]:  # §16.7's X and Y
    return [_episode(5, 2, ["s0", "s1"], True, 1), _episode(6, 2, ["s0", "s0", "s3"], False, 1, end="s4", invalid_at=0)]


def _iteration3() -> list[Episode]:
    return [_episode(7, 3, ["s4"], False, 2, end="s4"), _episode(8, 3, ["s1", "s9"], True, 2)]


def _play(store: TurnStore, k: int, episodes: list[Episode], run: str = "r") -> TurnTable:
    """What the trainer does in iteration k: store → table → stats → advantages stored at k."""
    store.add_episodes(episodes, run_id=run)
    table = with_state_stats(store, run, store.table(run_id=run, episode_ids=[e.episode_id for e in episodes]), k)
    store.set_advantages(run, table.turn_id, compute_advantages(table, "threespo"), iteration=k, estimator="threespo")
    return table


ANCHORS = ("s0", "s1", "s3", "s4", "goal", "s9")


def _counts(store, k, run="r"):
    st = state_success_stats(store, run, k, ANCHORS)
    return {a: st.of(a) for a in ANCHORS}, st.t


def test_query_counts_earlier_ok_episodes_once_per_state(tmp_path):
    with TurnStore(tmp_path / "s.sqlite") as store:
        assert _counts(store, 1) == ({a: (0, 0) for a in ANCHORS}, 1)  # no run yet
        _play(store, 1, _iteration1())
        table = _play(store, 2, _iteration2())
        counts, t = _counts(store, 2)
        assert t == 4 and counts == {"s0": (3, 1), "s1": (2, 1), "s3": (1, 0), "s4": (1, 0), "goal": (0, 0),
                                     "s9": (0, 0)}
        # the column the estimator read in iteration 2: (N, N_s) of anchor and next anchor, t
        # rows X t0 s0→s1, X t1 s1→goal (unseen), Y t0 s0→s0, Y t1 s0→s3, Y t2 s3→s4
        assert table.state_stats.tolist() == [[3, 1, 2, 1, 4], [2, 1, 0, 0, 4], [3, 1, 3, 1, 4], [3, 1, 1, 0, 4],
                                              [1, 0, 1, 0, 4]]
        # §16.7's update rule: after X and Y, s0 +2/+1, s1 +1/+1, s3 +1/+0, s4 (next only) +0, t +2
        after, t3 = _counts(store, 3)
        assert t3 == 6 and after == {"s0": (5, 2), "s1": (3, 2), "s3": (2, 0), "s4": (1, 0), "goal": (0, 0),
                                     "s9": (0, 0)}


def test_query_is_a_pure_function_of_earlier_iterations(tmp_path):
    with TurnStore(tmp_path / "s.sqlite") as store:
        _play(store, 1, _iteration1())
        _play(store, 2, _iteration2())
        at2 = _counts(store, 2)
        store.add_episodes(_iteration3(), run_id="r")  # stored, not yet scored: not earlier than iteration 3
        assert _counts(store, 3) == _counts(store, 3) and _counts(store, 2) == at2
        later = _counts(store, 3)
        _play(store, 4, [_episode(9, 4, ["s9"], True, 3)])  # a later iteration changes nothing before it
        assert _counts(store, 2) == at2 and _counts(store, 3) == later
        store.add_episodes([_episode(100, 0, ["s0"], True, 0)], run_id="r/eval-iter2")  # other runs never count
        assert _counts(store, 3) == later


def test_query_is_resume_safe(tmp_path):
    """A run interrupted after storing iteration 3 (advantages too) and resumed from the iteration-2
    checkpoint reads the same statistics as an uninterrupted run, at iteration 3 and after."""
    with TurnStore(tmp_path / "a.sqlite") as a, TurnStore(tmp_path / "b.sqlite") as b:
        tables_a = [_play(a, k, eps()) for k, eps in ((1, _iteration1), (2, _iteration2), (3, _iteration3))]
        _play(b, 1, _iteration1())
        _play(b, 2, _iteration2())
        _play(b, 3, _iteration3())  # ... then the process dies before checkpoint iter_3
        moved = b.split_off("r", since_policy_version=2, to_run_id="r.interrupted-x")  # set_aside_interrupted
        assert moved == [7, 8]
        assert _counts(b, 3) == _counts(a, 3)
        replayed = _play(b, 3, _iteration3())
        np.testing.assert_array_equal(replayed.state_stats, tables_a[2].state_stats)
        assert _counts(b, 4) == _counts(a, 4) and _counts(a, 4)[1] == 8  # the interrupted copy never counts twice

"""HiPER's HAE (ALGORITHMS.md §14, arXiv 2602.16165): the §14.6 worked example, the §14.5 edge
cases, the registered per-row advantage (D-14a), and the vectorised code against the plain
per-trajectory loop of ``hiper_reference.py`` on random tables."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from credit_tables import random_table
from hiper_reference import hiper_parts

from agentrl.credit import compute_advantages, validate_estimator_kwargs
from agentrl.credit.hiper import HAE, hiper_hae
from agentrl.types import NO_SUBGOAL, TurnTable

NAN = float("nan")
RAW = {"bootstrap_truncated": False, "norm_adv": False}  # §14.6: no bootstrap, norm_adv off


def _table(rows: list[dict], **extra) -> TurnTable:
    n = len(rows)
    col = lambda k, d=None: [r.get(k, d) for r in rows]  # noqa: E731
    return TurnTable(group=col("ep"), episode=col("ep"), t=col("t"), reward=col("r", 0.0),
                     terminated=col("done", False), truncated=[False] * n, action_valid=col("valid", True),
                     anchor_key=[0] * n, next_anchor_key=[0] * n, action_key=[0] * n, parent=[-1] * n,
                     episode_ok=col("ok", True), trainable=[True] * n, turn_id=list(range(n)),
                     switch=col("sw"), subgoal_key=col("g", NO_SUBGOAL), value_low=col("vl"),
                     value_high=col("vh", NAN), value_term=col("vt"), **extra)


# §14.6: A (success, T = 4) = rows 0–3, B (truncated, T = 3) = rows 4–6; subgoals 0 "find apple",
# 1 "heat apple", 2 "heat it"; value_high only on segment starts (NaN elsewhere: never read)
EXAMPLE = [
    dict(ep=0, t=0, sw=True, g=0, vh=4.0, vl=5.0, vt=4.5),
    dict(ep=0, t=1, sw=False, g=0, vl=6.0, vt=5.0),
    dict(ep=0, t=2, sw=True, g=1, vh=7.0, vl=7.5, vt=7.0),
    dict(ep=0, t=3, sw=False, g=2, r=10.0, done=True, vl=9.0, vt=8.5),
    dict(ep=1, t=0, sw=True, g=0, vh=4.0, vl=4.5, vt=4.0),
    dict(ep=1, t=1, sw=False, valid=False, vl=3.0, vt=3.0),
    dict(ep=1, t=2, sw=False, vl=2.0, vt=2.0),
]


def _close(got, want, atol=1e-9):
    np.testing.assert_allclose(got, want, atol=atol, rtol=0)


def test_worked_example_table():
    h = hiper_hae(_table(EXAMPLE), **RAW)
    _close(h.adv_low, [1.925, 0.925, 2.125, 0.625, -4.8, -3.3, -2.1])
    _close(h.ret_low, [6.925, 6.925, 9.625, 9.625, -0.3, -0.3, -0.1])
    _close(h.adv_high, [5.41875, 0, 2.625, 0, -4.3, 0, 0])
    _close(h.ret_high, [9.41875, 0, 9.625, 0, -0.3, 0, 0])
    _close(h.adv_term, [2.425, 1.925, 2.625, 1.125, -4.3, -3.3, -2.1])
    _close(h.ret_term, [6.925, 6.925, 9.625, 9.625, -0.3, -0.3, -0.1])
    # D-14a: the registered estimator is the per-row sum of the three span advantages
    adv = compute_advantages(_table(EXAMPLE), "hiper", **RAW)
    _close(adv, [1.925 + 5.41875 + 2.425, 0.925 + 1.925, 2.125 + 2.625 + 2.625, 0.625 + 1.125,
                 -4.8 - 4.3 - 4.3, -3.3 - 3.3, -2.1 - 2.1])


def test_worked_example_shaped_rewards():
    from agentrl.credit._segments import canonical
    from agentrl.credit.hiper import shaped_reward

    st, _ = canonical(_table(EXAMPLE))
    r = shaped_reward(st, keep_penalty=-0.3, keep_penalty_mode="normalized", keep_consistency_penalty=-0.3,
                      keep_consistency_requires_both=True, c_inv=0.1)
    _close(r, [0, -0.075, 0, 9.625, 0, -0.2, -0.1])
    fixed = shaped_reward(st, keep_penalty=-0.3, keep_penalty_mode="fixed", keep_consistency_penalty=-0.3,
                          keep_consistency_requires_both=True, c_inv=0.1)
    _close(fixed, [0, -0.3, 0, 10 - 0.3 - 0.3, 0, -0.3 - 0.1, -0.3])


def test_worked_example_bootstrap_truncated_changes_only_b():
    h = hiper_hae(_table(EXAMPLE), bootstrap_truncated=True, norm_adv=False)
    _close(h.adv_low, [1.925, 0.925, 2.125, 0.625, -2.8, -1.3, -0.1])
    _close(h.adv_high, [5.41875, 0, 2.625, 0, -0.3, 0, 0])
    # termination: B's segment ends at its own V_high (4): ret^te = [3.7, 3.7, 3.9]
    _close(h.adv_term, [2.425, 1.925, 2.625, 1.125, 3.7 - 4, 3.7 - 3, 3.9 - 2])


def test_worked_example_norm_adv():
    h = hiper_hae(_table(EXAMPLE), bootstrap_truncated=False, norm_adv=True)
    _close(h.adv_low, [1.020857, 0.625504, 1.099927, 0.506898, -1.637889, -1.04486, -0.570437], 1e-6)
    _close(h.adv_high, [1.020911, 0, 0.337074, 0, -1.357985, 0, 0], 1e-6)
    _close(h.adv_term, [0.98149, 0.796552, 1.055465, 0.500652, -1.50592, -1.136045, -0.692195], 1e-6)
    _close(h.ret_low, [6.925, 6.925, 9.625, 9.625, -0.3, -0.3, -0.1])  # returns are never whitened


def test_registered_defaults_are_the_alfworld_script():
    kw = validate_estimator_kwargs("hiper", {})
    assert kw == {"gamma": 1.0, "lam_turn": 1.0, "lam_seg": 0.95, "keep_penalty": -0.3,
                  "keep_penalty_mode": "normalized", "keep_consistency_penalty": -0.3,
                  "keep_consistency_requires_both": True, "c_inv": 0.1, "bootstrap_truncated": True,
                  "norm_adv": True, "use_term": True, "bootstrap": "own"}
    with pytest.raises(ValueError, match="keep_penalty_mode='mean' is not one of"):
        validate_estimator_kwargs("hiper", {"keep_penalty_mode": "mean"})
    with pytest.raises(ValueError, match="lam_seg=1.5 is out of range"):
        validate_estimator_kwargs("hiper", {"lam_seg": 1.5})


def test_one_turn_episode():
    # a single segment, the normalized keep penalty skipped (T = 1): A^lo = r − V_low, A^hi = r − V_high
    tb = _table([dict(ep=0, t=0, sw=False, g=0, r=1.0, done=True, vh=0.25, vl=0.5, vt=0.75)])
    h = hiper_hae(tb, **RAW)
    _close([h.adv_low[0], h.adv_high[0], h.adv_term[0]], [0.5, 0.75, 0.25])
    fixed = hiper_hae(tb, keep_penalty_mode="fixed", **RAW)  # the fixed penalty still applies to t = 0 KEEP
    _close([fixed.adv_low[0], fixed.adv_high[0]], [0.2, 0.45])


def test_missing_tags():
    # row 1 has no <switch> tag (KEEP: no new segment) nor a <subgoal> tag: no consistency penalty
    # (requires_both), no high member; row 2 has a subgoal but no switch span: no A^te there
    rows = [dict(ep=0, t=0, sw=True, g=0, vh=1.0, vl=1.0, vt=1.0),
            dict(ep=0, t=1, sw=False, g=NO_SUBGOAL, vl=1.0, vt=1.0),
            dict(ep=0, t=2, sw=False, g=0, r=3.0, done=True, vl=2.0, vt=2.0)]
    tb = _table(rows, has_switch=[True, False, False])
    h = hiper_hae(tb, keep_penalty=0.0, **RAW)
    # one segment, r = [0, 0, 3]: δ = [0 + 1 − 1, 0 + 2 − 1, 3 − 2] = [0, 1, 1], so A^lo = [2, 2, 1]
    _close(h.adv_low, [2.0, 2.0, 1.0])
    _close(h.adv_high, [2.0, 0, 0])
    _close(h.adv_term, [2.0, 0, 0])  # ret^te = [3, 3, 3]; only row 0 has a switch span
    _close(h.ret_term, [3.0, 3.0, 3.0])
    # without requires_both the missing subgoal counts as a change at t = 1 and t = 2
    h2 = hiper_hae(tb, keep_penalty=0.0, keep_consistency_requires_both=False, **RAW)
    _close(h2.ret_low, [2.4, 2.4, 2.7])
    # a missing subgoal on a segment start: A^hi still the critic target, but no subgoal tokens
    tb3 = dataclasses.replace(tb, subgoal_key=np.array([NO_SUBGOAL, NO_SUBGOAL, 0]))
    h3 = hiper_hae(tb3, keep_penalty=0.0, **RAW)
    _close(h3.adv_high, [0, 0, 0])
    _close(h3.ret_high, [3.0, 0, 0])


def test_failed_episodes_get_zero_and_leave_the_whitening():
    ok = _table(EXAMPLE)
    failed = _table(EXAMPLE + [dict(ep=2, t=0, sw=True, g=0, r=50.0, done=True, vh=0.0, vl=0.0, vt=0.0, ok=False)])
    a, b = hiper_hae(ok), hiper_hae(failed)
    for k in ("adv_low", "adv_high", "adv_term"):
        _close(getattr(b, k)[:7], getattr(a, k))
        assert getattr(b, k)[7] == 0.0
    _close(b.ret_low[7], 50.0)  # targets are still filled
    assert compute_advantages(failed, "hiper")[7] == 0.0


def test_invalid_action_is_penalised_once():
    rows = [dict(ep=0, t=0, sw=True, g=0, vh=0.0, vl=0.0, vt=0.0, r=1.0, done=True, valid=False)]
    h = hiper_hae(_table(rows), **RAW)
    _close([h.adv_low[0], h.adv_high[0], h.adv_term[0]], [0.9, 0.9, 0.9])


def test_next_state_bootstrap_reads_bootstrap_value():
    rows = [dict(ep=0, t=0, sw=True, g=0, vh=1.0, vl=2.0, vt=0.0), dict(ep=0, t=1, sw=False, g=0, vl=3.0, vt=0.0)]
    tb = _table(rows, bootstrap_value=[0.0, 10.0])
    own = hiper_hae(tb, keep_penalty=0.0, bootstrap_truncated=True, norm_adv=False)
    nxt = hiper_hae(tb, keep_penalty=0.0, bootstrap_truncated=True, norm_adv=False, bootstrap="next_state")
    _close(own.ret_low, [3.0, 3.0])  # own V_low of the last turn
    _close(own.ret_high, [1.0, 0])  # the segment's own V_high
    _close(nxt.ret_low, [10.0, 10.0])
    _close(nxt.ret_high, [10.0, 0])


def test_terminated_gamma_discounts_per_segment_length():
    # γ = 0.5, λ_seg = 1: segment 0 = rows 0–1 (d = 2), segment 1 = row 2 (terminated, r = 8)
    rows = [dict(ep=0, t=0, sw=True, g=0, vh=1.0, vl=0.0, vt=0.0), dict(ep=0, t=1, sw=False, g=0, vl=0.0, vt=0.0),
            dict(ep=0, t=2, sw=True, g=1, r=8.0, done=True, vh=2.0, vl=0.0, vt=0.0)]
    h = hiper_hae(_table(rows), gamma=0.5, lam_seg=1.0, keep_penalty=0.0, **RAW)
    # A^hi_1 = 8 − 2 = 6; A^hi_0 = (0 + 0.25·2 − 1) + 0.25·6 = 1.0
    _close(h.adv_high, [1.0, 0, 6.0])
    _close(h.ret_term, [0.5, 1.0, 8.0])  # row 1 ends segment 0: 0 + 0.5·V_high(2)


def test_bad_input_is_refused_with_the_fix():
    tb = _table(EXAMPLE)
    with pytest.raises(ValueError, match="use_term=True needs the value_term column"):
        hiper_hae(dataclasses.replace(tb, value_term=None))
    assert np.all(hiper_hae(dataclasses.replace(tb, value_term=None), use_term=False).adv_term == 0.0)
    with pytest.raises(ValueError, match="value_high is not finite on a segment-start row"):
        hiper_hae(dataclasses.replace(tb, value_high=np.full(7, NAN)))
    with pytest.raises(ValueError, match="value_low has non-finite values"):
        hiper_hae(dataclasses.replace(tb, value_low=np.full(7, NAN)))
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['switch'\]"):
        compute_advantages(dataclasses.replace(tb, switch=None), "hiper")
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['bootstrap_value'\]"):
        hiper_hae(tb, bootstrap="next_state")


KWARGS = [{}, {"bootstrap_truncated": False, "norm_adv": False, "keep_penalty_mode": "fixed", "gamma": 0.9,
               "lam_turn": 0.7, "lam_seg": 0.5, "keep_consistency_requires_both": False},
          {"use_term": False, "bootstrap": "next_state", "keep_penalty": -3.5, "c_inv": 0.0, "gamma": 0.95}]


@pytest.mark.parametrize("kw", KWARGS, ids=["defaults", "raw", "next_state"])
def test_vectorised_equals_the_plain_loop_on_random_tables(kw):
    for seed in range(60):
        tb = random_table(np.random.default_rng(seed))
        got, want = hiper_hae(tb, **kw), hiper_parts(tb, **kw)
        for k in HAE.__dataclass_fields__:
            _close(getattr(got, k), want[k])
        perm = np.random.default_rng(seed + 1).permutation(len(tb))
        _close(hiper_hae(tb.take(perm), **kw).adv_low, got.adv_low[perm], 1e-12)

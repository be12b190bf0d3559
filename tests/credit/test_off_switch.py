"""Off-switch = baseline, bit for bit (issue 49): every estimator option that adds a term to a
simpler estimator reproduces that simpler estimator exactly when the option is off, and is not a
no-op when it is on.

The pairs (ALGORITHMS.md §§2–16; each derived from the estimator's own formula):

* GiGPO, G2PO, BiPACE, BEACON, OPRL ``A = A_ep + ω·A_step``, GraphGPO ``A = w_step·A_step + w_ep·A_ep``:
  ω = 0 (``step_advantage_w``) gives the episode term, i.e. GRPO with the same ``mode``,
  ``stats_over``, ``c_inv`` and ``eps`` (``0.0·x`` is ±0 and ``a + ±0 == a``: exact).
* BEACON ``milestone_reward`` R_ms = 0 *and* ``c_inv`` = 0: every step reward is 0, so the segment
  term is 0 (tie / singleton rule) and A = GRPO(mean_norm, c_inv = 0); the same with no milestone in
  the table (upstream's fall-back to GRPO). R_ms = 0 alone is not an off-switch: the invalid
  penalty also enters the segment term (§15.3), see ``test_beacon_milestone_reward_zero_...``.
* 3SPO ``omega_k`` = 0: w = 0.5 on every row, so the state-score term (0.5 − w)·ΔS is 0 and the
  step reward is the novelty + ½·reward of a run without state statistics (first iteration).
* 3SPO and GraphGPO ``episode_advantage_w`` = w: the added term is exactly w × GRPO
  (``test_episode_weight_adds_exactly_w_times_grpo``), so w = 0 leaves the base estimator.
* StepOPSD ``lambda_mix`` λ = 0: ``Ã = A·(1 − 0 + 0·W) = A·1.0``, GRPO with the same ``mode``,
  ``stats_over``, ``c_inv`` and ``eps``.
* turn-PPO λ = 0: ``A = δ``, the one-step TD error (reference below, a plain loop).
* HiPER: ``use_term`` off → adv_low + adv_high of the three-level HAE; ``keep_penalty`` 0 → the
  keep term is gone whichever its mode; ``keep_consistency_penalty`` 0 → the subgoal texts no
  longer enter the reward; all shaping off, ``use_term`` and ``norm_adv`` off, one segment per
  episode and no subgoal (bootstrap from V(s_T)) → turn-PPO with λ = λ_turn.
* Every invalid-action penalty (``c_inv``, G2PO's ``sibling_invalid_penalty``) at 0 → the same
  estimator on the table with every action valid (then the penalty's size does not matter).

Every equality here is bit-exact (``assert_array_equal`` and equal bytes): each off-switch leaves
the same float operations on the same operands, up to adding a zero.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest
from credit_tables import BATCH12, make_table, random_hiper_columns, random_scores, random_state_stats, random_table

from agentrl.credit import compute_advantages
from agentrl.credit.hiper import hiper_hae
from agentrl.types import NO_SUBGOAL, TurnTable

Fn = Callable[[TurnTable], TurnTable]


def _critic_columns(tb: TurnTable, seed: int) -> TurnTable:
    """``tb`` with turn-PPO's and HiPER's columns, 3SPO's prior statistics and OPRL's / StepOPSD's score
    columns (from their own generators)."""
    n = len(tb)
    rng = np.random.default_rng(seed)
    stats = random_state_stats(tb.anchor_key, tb.next_anchor_key, len(tb.anchor_vocab), seed + 2)
    return dataclasses.replace(tb, value=rng.normal(size=n), bootstrap_value=rng.normal(size=n), state_stats=stats,
                               scores=random_scores(tb.episode_ok, seed + 3), **random_hiper_columns(n, seed + 1))


def _batch12(failed: bool) -> TurnTable:
    """The §12 batch (repeated anchors, a loop, truncated episodes) with a second invalid action, on
    the repeated anchor u1 (B-1, t = 2; §12's own is on the singleton s3), BEACON milestones on t = 1
    and on the rewarded turns; ``failed``: B-3 failed and A-1's second turn not trainable."""
    rows = [r[:7] + (0,) + r[8:] if r[1:3] == ("B-1", 2) else r for r in BATCH12]
    ms = [r[2] == 1 or r[5] > 0 for r in rows]
    n_ms = [2 if r[0] == "A" else -1 for r in rows]
    ok = [r[1] != "B-3" for r in rows] if failed else None
    train = [not (r[1] == "A-1" and r[2] == 1) for r in rows] if failed else None
    tb = make_table(rows, episode_ok=ok, trainable=train, milestone=np.array(ms), n_milestones=np.array(n_ms))
    return _critic_columns(tb, 7 if failed else 3)


# random tables (§ credit_tables.random_table): 3 task groups, singletons, loops, ties, invalid
# actions, truncation, failed episodes, non-trainable rows, shuffled rows, milestones, HiPER columns
RANDOM_SEEDS = (0, 1, 2, 5)
TABLES = {"batch12": lambda: _batch12(False), "batch12-failed": lambda: _batch12(True),
          **{f"random{s}": (lambda s=s: random_table(np.random.default_rng(s), n_groups=3)) for s in RANDOM_SEEDS}}


@pytest.fixture(scope="module", params=list(TABLES), ids=list(TABLES))
def table(request) -> TurnTable:
    return TABLES[request.param]()


def test_tables_exercise_the_edge_cases():
    """The tables hold what makes the step terms non-trivial: several groups, repeated anchors,
    invalid actions, failed episodes, non-trainable rows, truncated episodes."""
    tbs = [f() for f in TABLES.values()]
    for tb in tbs:
        assert np.unique(tb.group).size >= 2 and (~tb.action_valid).any() and tb.truncated.any()
        key = tb.group * 1000 + tb.anchor_key
        assert np.unique(key).size < len(tb)  # a repeated (group, anchor)
    assert all((~tb.episode_ok).any() and (~tb.trainable).any() for tb in tbs[1:])


def _same(tb: TurnTable) -> TurnTable:
    return tb


def _all_valid(tb: TurnTable) -> TurnTable:
    return dataclasses.replace(tb, action_valid=np.ones(len(tb), bool))


def _no_milestones(tb: TurnTable) -> TurnTable:
    return dataclasses.replace(tb, milestone=np.zeros(len(tb), bool), n_milestones=None)


def _fresh_state_stats(tb: TurnTable) -> TurnTable:
    """3SPO's first iteration: no earlier episode (N = N_s = 0, t = 1)."""
    return dataclasses.replace(tb, state_stats=np.tile([0, 0, 0, 0, 1], (len(tb), 1)))


def _no_term_head(tb: TurnTable) -> TurnTable:
    return dataclasses.replace(tb, value_term=None)


def _one_subgoal_text(tb: TurnTable) -> TurnTable:
    """Every present subgoal the same text (which rows have one is unchanged)."""
    return dataclasses.replace(tb, subgoal_key=np.where(tb.subgoal_key == NO_SUBGOAL, NO_SUBGOAL, 0))


def _turn_ppo_values(tb: TurnTable) -> TurnTable:
    """HiPER's V_low = turn-PPO's V (segments and subgoals as they are)."""
    return dataclasses.replace(tb, value_low=tb.value.copy())


def _flat_hiper(tb: TurnTable) -> TurnTable:
    """One HiPER segment per episode (no SWITCH), no subgoal, V_low = turn-PPO's V."""
    n = len(tb)
    return dataclasses.replace(_turn_ppo_values(tb), switch=np.zeros(n, bool), subgoal_key=np.full(n, NO_SUBGOAL))


def simpler(name: str, table_fn: Fn = _same, **kwargs) -> Callable[[TurnTable], np.ndarray]:
    """The simpler estimator ``name`` with ``kwargs`` on ``table_fn(table)``."""
    return lambda tb: compute_advantages(table_fn(tb), name, **kwargs)


def one_step_td(gamma: float, c_inv: float) -> Callable[[TurnTable], np.ndarray]:
    """§10.3 with λ = 0, a plain loop over rows: δ_t = r_t − c_inv·invalid_t + γ·V_{t+1}·(1 − d_t) − V_t
    (V_T = bootstrap_value), 0 on failed-episode and non-trainable rows."""
    def fn(tb: TurnTable) -> np.ndarray:
        row = {(int(e), int(t)): i for i, (e, t) in enumerate(zip(tb.episode, tb.t))}
        out = np.zeros(len(tb))
        for i in range(len(tb)):
            if not (tb.episode_ok[i] and tb.trainable[i]):
                continue
            j = row.get((int(tb.episode[i]), int(tb.t[i]) + 1))
            v_next = float(tb.value[j]) if j is not None else float(tb.bootstrap_value[i])
            r = float(tb.reward[i]) - c_inv * (not tb.action_valid[i])
            out[i] = r + gamma * v_next * (1.0 - float(tb.terminated[i])) - float(tb.value[i])
        return out
    return fn


def hae_without_term(**kwargs) -> Callable[[TurnTable], np.ndarray]:
    """adv_low + adv_high of the three-level HAE (``use_term`` on, value_term present)."""
    def fn(tb: TurnTable) -> np.ndarray:
        h = hiper_hae(tb, use_term=True, **kwargs)
        return h.adv_low + h.adv_high
    return fn


@dataclass(frozen=True)
class Pair:
    """``compute_advantages(table_fn(tb), name, **off) == ref(tb)`` bit for bit, and each
    ``(on_kwargs, on_table_fn)`` of ``on`` (kwargs override ``off``) changes the result."""

    id: str
    name: str
    off: dict
    ref: Callable[[TurnTable], np.ndarray]
    on: list = field(default_factory=list)  # [(kwargs, table_fn)]
    table_fn: Fn = _same


def _ep(name: str, on_w: float, **kw) -> list[Pair]:
    """ω = 0 of an estimator ``A = A_ep + ω·A_step`` → GRPO with the same mode, stats_over, c_inv:
    with the defaults, and with the other mode, trajectory statistics and another c_inv / eps."""
    mode = kw.pop("mode")
    other = "mean_std_norm" if mode == "mean_norm" else "mean_norm"
    alt = dict(mode=other, stats_over="trajectories", c_inv=0.3, eps=1e-3)
    return [Pair(f"{name}-w0", name, dict(step_advantage_w=0.0, **kw), simpler("grpo", mode=mode),
                 [({"step_advantage_w": on_w}, _same)]),
            Pair(f"{name}-w0-{other}-trajectories", name, dict(step_advantage_w=0.0, **kw, **alt),
                 simpler("grpo", **alt), [({"step_advantage_w": on_w}, _same)])]


C_INV_ON = 0.5  # the penalty of the on-variant and of the all-valid reference (any size: no invalid row)

PAIRS: list[Pair] = [
    *_ep("gigpo", 1.0, mode="mean_std_norm"),
    *_ep("g2po", 1.0, mode="mean_std_norm"),
    *_ep("bipace", 1.0, mode="mean_std_norm"),
    *_ep("graphgpo", 1.0, mode="mean_std_norm"),  # episode_advantage_w stays 1
    *_ep("beacon", 10.0, mode="mean_norm"),
    *_ep("oprl", 1.0, mode="mean_std_norm"),
    Pair("stepopsd-lambda0", "stepopsd", dict(lambda_mix=0.0), simpler("grpo"),
         [({"lambda_mix": 1.0, "alpha_clip": 0.5}, _same)]),
    Pair("stepopsd-lambda0-mean_norm-trajectories", "stepopsd",
         dict(lambda_mix=0.0, alpha_clip=0.5, mode="mean_norm", stats_over="trajectories", c_inv=0.3, eps=1e-3),
         simpler("grpo", mode="mean_norm", stats_over="trajectories", c_inv=0.3, eps=1e-3),
         [({"lambda_mix": 0.2}, _same)]),
    Pair("beacon-milestone_reward0-c_inv0", "beacon", dict(milestone_reward=0.0, c_inv=0.0),
         simpler("grpo", mode="mean_norm", c_inv=0.0), [({"milestone_reward": 10.0}, _same)]),
    Pair("beacon-no-milestones-c_inv0", "beacon", dict(c_inv=0.0), simpler("grpo", mode="mean_norm", c_inv=0.0),
         [({}, _same)], table_fn=_no_milestones),
    Pair("threespo-omega_k0", "threespo", dict(omega_k=0.0), simpler("threespo", _fresh_state_stats, omega_k=0.1),
         [({"omega_k": 0.1}, _same)]),
    Pair("turn_ppo-lam0", "turn_ppo", dict(lam=0.0), one_step_td(0.99, 0.0), [({"lam": 0.9}, _same)]),
    Pair("turn_ppo-lam0-gamma0.9-c_inv0.2", "turn_ppo", dict(lam=0.0, gamma=0.9, c_inv=0.2), one_step_td(0.9, 0.2),
         [({"lam": 0.5}, _same)]),
    Pair("hiper-use_term-off", "hiper", dict(use_term=False), hae_without_term(), [({"use_term": True}, _same)],
         table_fn=_no_term_head),
    Pair("hiper-use_term-off-raw", "hiper", dict(use_term=False, norm_adv=False, bootstrap_truncated=False),
         hae_without_term(norm_adv=False, bootstrap_truncated=False), [({"use_term": True}, _same)],
         table_fn=_no_term_head),
    Pair("hiper-keep_penalty0", "hiper", dict(keep_penalty=0.0),
         simpler("hiper", keep_penalty=0.0, keep_penalty_mode="fixed"), [({"keep_penalty": -0.3}, _same)]),
    Pair("hiper-keep_consistency_penalty0", "hiper", dict(keep_consistency_penalty=0.0),
         simpler("hiper", _one_subgoal_text, keep_consistency_penalty=0.0, keep_consistency_requires_both=False),
         [({"keep_consistency_penalty": -0.3}, _same)]),
    Pair("hiper-flat-unshaped-is-turn_ppo", "hiper",
         dict(gamma=0.99, lam_turn=0.9, keep_penalty=0.0, keep_consistency_penalty=0.0, c_inv=0.1, use_term=False,
              norm_adv=False, bootstrap="next_state"),
         simpler("turn_ppo", gamma=0.99, lam=0.9, c_inv=0.1),
         [({"keep_penalty": -0.3}, _flat_hiper), ({"use_term": True}, _flat_hiper),
          ({"norm_adv": True}, _flat_hiper), ({}, _turn_ppo_values)],  # the last: segments and subgoals on
         table_fn=_flat_hiper),
    *[Pair(f"{name}-c_inv0", name, dict(c_inv=0.0), simpler(name, _all_valid, c_inv=C_INV_ON),
           [({"c_inv": C_INV_ON}, _same)])
      for name in ("grpo", "grpo_mean", "dr_grpo", "gigpo", "hgpo", "bipace", "graphgpo", "beacon", "threespo",
                   "hiper", "turn_ppo", "oprl", "stepopsd")],
    Pair("g2po-invalid-penalties0", "g2po", dict(c_inv=0.0, sibling_invalid_penalty=0.0),
         simpler("g2po", _all_valid, c_inv=C_INV_ON, sibling_invalid_penalty=C_INV_ON),
         [({"c_inv": C_INV_ON}, _same), ({"sibling_invalid_penalty": C_INV_ON}, _same)]),
]


def assert_bitwise_equal(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype == np.float64
    assert got.tobytes() == want.tobytes(), "equal values but different bits (signed zeros)"


def test_pair_ids_are_unique():
    assert len({p.id for p in PAIRS}) == len(PAIRS)


@pytest.mark.parametrize("pair", PAIRS, ids=[p.id for p in PAIRS])
def test_off_switch_is_the_simpler_estimator_bit_for_bit(pair: Pair, table: TurnTable):
    got = compute_advantages(pair.table_fn(table), pair.name, **pair.off)
    assert_bitwise_equal(got, pair.ref(table))


@pytest.mark.parametrize("pair", PAIRS, ids=[p.id for p in PAIRS])
def test_option_on_is_not_a_no_op(pair: Pair, table: TurnTable):
    base = compute_advantages(pair.table_fn(table), pair.name, **pair.off)
    assert pair.on
    for kwargs, table_fn in pair.on:
        on = compute_advantages(table_fn(table), pair.name, **{**pair.off, **kwargs})
        assert not np.array_equal(on, base), f"{pair.id}: {kwargs} on {table_fn.__name__} changes nothing"


# 3SPO and GraphGPO add the episode term with its own weight (§16.3, §6.3 step 6-7): the
# estimator with weight w is the estimator with weight 0 plus w × GRPO (same mode, c_inv; 3SPO's
# statistics over steps), exactly; so w = 0 is the base estimator.
EP_WEIGHT = [
    ("threespo", {}, dict(mode="mean_norm", stats_over="steps")),
    ("threespo", dict(mode="mean_std_norm", c_inv=0.3), dict(mode="mean_std_norm", stats_over="steps", c_inv=0.3)),
    ("graphgpo", {}, dict(mode="mean_std_norm")),
    ("graphgpo", dict(mode="mean_norm", stats_over="trajectories", step_advantage_w=2.0, c_inv=0.3),
     dict(mode="mean_norm", stats_over="trajectories", c_inv=0.3)),
]


@pytest.mark.parametrize("name,kw,grpo_kw", EP_WEIGHT, ids=["threespo", "threespo-std", "graphgpo", "graphgpo-mean"])
@pytest.mark.parametrize("w", [0.5, 1.0, 3.0])
def test_episode_weight_adds_exactly_w_times_grpo(name, kw, grpo_kw, w, table):
    base = compute_advantages(table, name, episode_advantage_w=0.0, **kw)
    grpo = compute_advantages(table, "grpo", **grpo_kw)
    assert np.any(grpo != 0.0)  # the added term is not 0 on these tables
    assert_bitwise_equal(compute_advantages(table, name, episode_advantage_w=w, **kw), base + w * grpo)


def test_beacon_milestone_reward_zero_keeps_the_invalid_penalty_term(table):
    """R_ms = 0 alone is not an off-switch: the step reward keeps −c_inv·invalid (§15.3: the invalid
    penalty also hits step rewards), so BEACON is GRPO plus w × that penalty's segment term, and
    equals GRPO only where no eligible invalid action is compared."""
    got = compute_advantages(table, "beacon", milestone_reward=0.0)
    grpo = compute_advantages(table, "grpo", mode="mean_norm")
    assert not np.array_equal(got, grpo)
    assert_bitwise_equal(compute_advantages(_all_valid(table), "beacon", milestone_reward=0.0),
                         compute_advantages(_all_valid(table), "grpo", mode="mean_norm"))

"""examples/custom_estimator.py: the registered ``discounted_grpo`` estimator against
hand-computed advantages, its config-time validation, and one training iteration with it
(tiny random model, toy env)."""

from __future__ import annotations

import dataclasses
import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

from agentrl.config import ConfigError
from agentrl.credit import compute_advantages, estimator_params, list_estimators
from agentrl.train.checks import checked_config_from_dict

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def mod():
    sys.path.insert(0, str(EXAMPLES))
    try:
        yield importlib.import_module("custom_estimator")
    finally:
        sys.path.remove(str(EXAMPLES))


def test_registered_with_its_signature_as_schema(mod):
    assert mod.NAME in list_estimators()
    assert estimator_params(mod.NAME) == {"gamma": 0.9, "c_inv": 0.0}
    importlib.reload(mod)  # importing again does not register twice
    assert list_estimators().count(mod.NAME) == 1


@pytest.mark.parametrize("kwargs, expected", [
    # ep0 R=[0.5, 1.0]; ep1 R=[0, 0-0.1, 0]; mean over 5 ok rows = 1.4/5 = 0.28; ep2 failed -> 0
    ({"gamma": 0.5, "c_inv": 0.1}, [0.22, 0.72, -0.28, -0.38, -0.28, 0.0, 0.0]),
    # ep0 R=[1, 1]; ep1 R=[0, 0, 0]; mean 2/5 = 0.4
    ({"gamma": 1.0, "c_inv": 0.0}, [0.6, 0.6, -0.4, -0.4, -0.4, 0.0, 0.0]),
    # gamma=0: only the own reward; mean 1/5
    ({"gamma": 0.0}, [-0.2, 0.8, -0.2, -0.2, -0.2, 0.0, 0.0]),
])
def test_demo_table_hand_values(mod, kwargs, expected):
    np.testing.assert_allclose(compute_advantages(mod.demo_table(), mod.NAME, **kwargs), expected, atol=1e-12)


def test_groups_have_separate_baselines_and_row_order_does_not_matter(mod):
    table = dataclasses.replace(mod.demo_table(), group=np.array([0, 0, 1, 1, 1, 0, 0]))
    # group 0: ep0 scores [0.5, 1.0] (ep2 failed) -> mean 0.75; group 1: [0, -0.1, 0] -> mean -1/30
    expected = np.array([-0.25, 0.25, 1 / 30, -0.1 + 1 / 30, 1 / 30, 0.0, 0.0])
    got = compute_advantages(table, mod.NAME, gamma=0.5, c_inv=0.1)
    np.testing.assert_allclose(got, expected, atol=1e-12)
    perm = np.array([4, 6, 1, 0, 5, 3, 2])
    np.testing.assert_allclose(compute_advantages(table.take(perm), mod.NAME, gamma=0.5, c_inv=0.1), expected[perm],
                               atol=1e-12)


def test_bad_names_fail_at_config_time(mod, tmp_path):
    cfg = mod.train_config("unused-model", tmp_path, gamma=0.5)
    assert cfg.algorithm.estimator == mod.NAME and cfg.algorithm.kwargs == {"gamma": 0.5, "c_inv": 0.0}
    raw = {"env": {"id": "agentrl/Toy-v0"}, "algorithm": {"estimator": mod.NAME, "kwargs": {"gama": 0.5}}}
    with pytest.raises(ConfigError, match="did you mean 'gamma'"):
        checked_config_from_dict(raw)
    with pytest.raises(ValueError, match="gamma must be in"):
        compute_advantages(mod.demo_table(), mod.NAME, gamma=1.5)


def test_one_training_iteration_stores_its_advantages(mod, tiny_dir, tmp_path):
    from agentrl.store import TurnStore
    from agentrl.train import train

    result = train(mod.train_config(tiny_dir, tmp_path), resume=False)
    assert result.state.iteration == 1 and result.state.episodes_stored == 6
    assert result.state.optimizer_steps >= 1  # seed 3 has wins and losses: non-zero advantages
    with TurnStore(result.store_path, readonly=True) as store:
        table = store.table(run_id=result.run_id)
        stored = {a.turn_id: a.value for a in store.advantages(result.run_id)}
        assert {a.estimator for a in store.advantages(result.run_id)} == {mod.NAME}
    recomputed = compute_advantages(table, mod.NAME, gamma=0.9, c_inv=0.0)
    np.testing.assert_array_equal([stored[int(i)] for i in table.turn_id], recomputed)
    assert np.any(recomputed != 0.0)


def _reference(table, gamma, c_inv):
    """Row-by-row loops: the definition in the estimator's docstring."""
    score = {}
    for e in np.unique(table.episode):
        rows = sorted(np.flatnonzero(table.episode == e), key=lambda i: table.t[i])
        ret = 0.0
        for i in reversed(rows):
            ret = table.reward[i] + gamma * ret
            score[i] = ret - c_inv * (not table.action_valid[i])
    out = np.zeros(len(table))
    for g in np.unique(table.group):
        ok = [i for i in range(len(table)) if table.group[i] == g and table.episode_ok[i] and table.trainable[i]]
        for i in ok:
            out[i] = score[i] - sum(score[j] for j in ok) / len(ok)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_vectorised_equals_row_by_row_reference(mod, seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 7, size=12)
    episode = np.repeat(np.arange(12), lengths)
    n = episode.size
    table = mod.demo_table()
    table = dataclasses.replace(
        table, group=episode // 4, episode=episode, t=np.concatenate([np.arange(k) for k in lengths]),
        reward=rng.choice([0.0, 0.5, 1.0], size=n), terminated=np.zeros(n, bool), truncated=np.zeros(n, bool),
        action_valid=rng.random(n) < 0.8, anchor_key=np.zeros(n, np.int64), next_anchor_key=np.zeros(n, np.int64),
        action_key=np.zeros(n, np.int64), parent=np.full(n, -1), episode_ok=np.repeat(rng.random(12) < 0.85, lengths),
        trainable=rng.random(n) < 0.9, turn_id=np.arange(n))
    perm = rng.permutation(n)
    got = compute_advantages(table.take(perm), mod.NAME, gamma=0.7, c_inv=0.1)
    np.testing.assert_allclose(got, _reference(table, 0.7, 0.1)[perm], rtol=1e-12, atol=1e-12)

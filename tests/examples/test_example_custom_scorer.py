"""examples/custom_scorer.py, registered from outside the package: a toy step scorer and a toy
span estimator train through the real trainer, which serves their declarations (issue 47): the
scorer fills its column before the estimator runs, learns after the update, is saved into every
checkpoint and restored on resume; the update trains each span with its own advantage."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

from agentrl.credit import compute_advantages, get_estimator

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def mod():
    """The example, registered for this module's tests only: a later "every registered estimator"
    loop in the same process must not meet an estimator whose scorer column it cannot fill."""
    from agentrl.credit import unregister_estimator
    from agentrl.train.scorers import unregister_scorer

    sys.path.insert(0, str(EXAMPLES))
    try:
        module = importlib.import_module("custom_scorer")
        module.register()  # a module imported before (and unregistered since) registers again
        yield module
    finally:
        sys.path.remove(str(EXAMPLES))
        unregister_estimator(module.NAME)
        unregister_scorer(module.SCORER)


def test_the_declarations_are_registered(mod):
    from agentrl.train.scorers import list_scorers

    d = get_estimator(mod.NAME).declares
    assert d.scorers == (mod.SCORER,) and d.spans.names == ("first", "rest") and d.critic is None
    assert mod.SCORER in list_scorers() and "critic" in list_scorers()
    importlib.reload(mod)  # importing again registers nothing twice
    assert list_scorers().count(mod.SCORER) == 1


def _table(scores=None):
    from agentrl.types import TurnTable

    n = 4  # group 0: episode 0 wins in 2 turns, episode 1 scores 0 in 2 turns
    return TurnTable(group=np.zeros(n, np.int64), episode=[0, 0, 1, 1], t=[0, 1, 0, 1], reward=[0.0, 1.0, 0.0, 0.0],
                     terminated=[0, 1, 0, 1], truncated=np.zeros(n, bool), action_valid=np.ones(n, bool),
                     anchor_key=np.arange(n), next_anchor_key=np.arange(n), action_key=np.zeros(n, np.int64),
                     parent=[-1, 0, -1, 2], episode_ok=np.ones(n, bool), trainable=np.ones(n, bool),
                     turn_id=np.arange(n), scores=scores or {})


def test_hand_values_and_the_missing_column(mod):
    with pytest.raises(ValueError, match="lacks column.*surprise"):
        compute_advantages(_table(), mod.NAME)
    table = _table({mod.COLUMN: [1.0, 2.0, 3.0, 6.0]})
    # GRPO: returns 1, 1, 0, 0 - mean 0.5; surprise mean 3: beta (3 - s) = 1, 0.5, 0, -1.5
    np.testing.assert_allclose(compute_advantages(table, mod.NAME, beta=0.5), [1.5, 1.0, -0.5, -2.0])
    assert table.take(np.array([3, 0])).scores[mod.COLUMN].tolist() == [6.0, 1.0]
    with pytest.raises(ValueError, match=r"scores\['surprise'\] must have shape"):
        _table({mod.COLUMN: [1.0]})


def test_trains_serving_scorer_and_spans_then_resumes(mod, tiny_dir, tmp_path, monkeypatch):
    from agentrl.store import TurnStore
    from agentrl.train import plan, train

    seen = []
    real = plan.build_batch

    def spy(*args, **kwargs):
        seen.append((args[3], kwargs.get("token_mask")))  # the advantages the update trains on
        return real(*args, **kwargs)

    monkeypatch.setattr(plan, "build_batch", spy)
    mod.BUILT.clear()
    result = train(mod.train_config(tiny_dir, tmp_path), resume=False)
    assert result.state.iteration == 1 and result.state.optimizer_steps >= 1
    scorer = mod.BUILT[-1]
    assert scorer.calls == {"score": 1, "learn": 1}
    table = scorer.last_table  # the table the estimator ran on: the scorer's column is there
    assert table.scores[mod.COLUMN].shape == (len(table),) and np.all(table.scores[mod.COLUMN] > 0)
    adv = compute_advantages(table, mod.NAME, beta=0.5)
    with TurnStore(result.store_path, readonly=True) as store:
        stored = {a.turn_id: a.value for a in store.advantages(result.run_id)}
        metrics = store.metrics(result.run_id)
    np.testing.assert_array_equal([stored[int(i)] for i in table.turn_id], adv)
    assert [m.iteration for m in metrics if m.name == "surprise/mean"] == [1]
    # the update's per-token advantages: the first token GRPO's, the rest the surprise term
    (advantages, masks), = seen
    rows = np.flatnonzero(table.episode_ok & table.trainable & (adv != 0.0))
    first, rest = mod._grpo(table), mod._surprise_term(table, 0.5)
    assert len(advantages) == rows.size and masks == [None] * rows.size
    for a, row in zip(advantages, rows):
        assert a[0] == first[row] and np.all(a[1:] == rest[row])
    assert any(first[r] != rest[r] for r in rows)  # the spans really differ
    folder = result.run_dir / "checkpoints" / (result.run_dir / "checkpoints" / "latest").read_text()
    assert (folder / mod.SurpriseScorer.FILE).is_file()
    # resume: a new scorer is built and loads the checkpoint's state, then goes on
    again = train(mod.train_config(tiny_dir, tmp_path, iterations=2), resume=True)
    assert again.state.iteration == 2
    assert mod.BUILT[-1] is not scorer and mod.BUILT[-1].calls == {"score": 2, "learn": 2}


@pytest.mark.parametrize("declared, message", [
    ({"scorers": ("nope",)}, r"declares step scorer\(s\) \['nope'\] that are not registered \(registered: critic"),
    ({"store_query": "nope"}, r"declares the store query 'nope', which is not registered \(registered: state_stats\)"),
])
def test_an_undeclarable_need_is_refused_before_any_rollout(declared, message, mod, tmp_path):
    from agentrl.config import ConfigError
    from agentrl.credit import register_estimator, unregister_estimator
    from agentrl.train.checks import checked_config_from_dict

    register_estimator("needs_nope", **declared)(lambda table, *, beta=0.5: np.zeros(len(table)))
    try:
        raw = {"run": {"out_dir": str(tmp_path)}, "env": {"id": "agentrl/Toy-v0"},
               "algorithm": {"estimator": "needs_nope"}}
        with pytest.raises(ConfigError, match=message):
            checked_config_from_dict(raw)
    finally:
        unregister_estimator("needs_nope")


def test_declarations_of_the_wrong_kind_are_refused_at_registration():
    from agentrl.credit import register_estimator
    from agentrl.train.scorers import register_scorer

    fn = lambda table: np.zeros(len(table))  # noqa: E731
    with pytest.raises(TypeError, match="critic= takes a CriticHeads, got dict"):
        register_estimator("bad_critic", critic={"columns": ("value",)})(fn)
    with pytest.raises(TypeError, match="scorers= takes scorer names"):
        register_estimator("bad_scorers", scorers=[1])(fn)
    with pytest.raises(TypeError, match=r"got the string 'critic'; write scorers=\('critic',\)"):
        register_estimator("bad_scorers", scorers="critic")(fn)
    with pytest.raises(TypeError, match="the factory must be callable"):
        register_scorer("not_callable", "x")

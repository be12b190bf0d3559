"""End-to-end: asynchronous rollouts (``rollout.max_staleness``) through ``agentrl.train.train``
on the toy env with the tiny model and local engine workers.

- S = 0 is the synchronous loop: the same TurnTable, advantages and final weights as a run
  that never heard of the option (run twice, compared exactly).
- S = 2 (both ``on_weight_update`` modes): every trained turn was sampled within S policy
  versions of the trainer's version at its iteration (the property of the bound), turns
  record their own versions, and the ``async/*`` metrics (dropped, carried, staleness
  histogram, waits) are logged every iteration.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_train_loop import _cfg, _weights  # noqa: E402

from agentrl.config import ConfigError, config_from_dict  # noqa: E402
from agentrl.store import TurnStore  # noqa: E402


def _train(cfg):
    from agentrl.train import train

    return train(cfg, resume=False)


def _trained(result):
    """{turn_id: (iteration it was trained at, its policy version)} and the table."""
    with TurnStore(result.store_path, readonly=True) as store:
        episodes = store.load_episodes(result.run_id)
        adv = store.advantages(result.run_id)
    version = {t.turn_id: t.policy_version for e in episodes for t in e.turns}
    return {int(a.turn_id): (int(a.iteration), version[int(a.turn_id)]) for a in adv}, episodes


def test_max_staleness_zero_is_the_synchronous_loop(tiny_dir, tmp_path):
    base = _train(_cfg(tiny_dir, tmp_path, name="plain", rollout__engines=1, run__eval_every=0))
    zero = _train(_cfg(tiny_dir, tmp_path, name="s0", rollout__engines=1, rollout__max_staleness=0,
                       run__eval_every=0))
    with TurnStore(base.store_path, readonly=True) as a, TurnStore(zero.store_path, readonly=True) as b:
        ta, tb = a.table(run_id=base.run_id), b.table(run_id=zero.run_id)
        aa, ab = a.advantages(base.run_id), b.advantages(zero.run_id)
    for col in ("group", "episode", "t", "reward", "action_key", "anchor_key"):
        assert np.array_equal(getattr(ta, col), getattr(tb, col)), col
    assert sorted(_trained(base)[0].items()) == sorted(_trained(zero)[0].items())  # (iteration, version) per turn
    assert [(x.turn_id, x.iteration, x.value) for x in aa] == [(x.turn_id, x.iteration, x.value) for x in ab]
    wa, _ = _weights(base.run_dir)
    wb, _ = _weights(zero.run_dir)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.parametrize("mode", ["continue", "drain"])
def test_max_staleness_two_never_trains_a_turn_older_than_two_versions(tiny_dir, tmp_path, mode):
    s = 2
    cfg = _cfg(tiny_dir, tmp_path, name=f"s2-{mode}", iterations=4, rollout__engines=1, rollout__max_staleness=s,
               rollout__on_weight_update=mode, run__eval_every=0)
    result = _train(cfg)
    assert result.state.iteration == 4 and result.state.policy_version == 4
    trained, _ = _trained(result)
    assert trained, "no turn was trained"
    ages = [it - 1 - v for it, v in trained.values()]  # the trainer is at version k − 1 in (1-based) iteration k
    assert min(ages) >= 0 and max(ages) <= s
    rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 4
    per_iteration = cfg.rollout.groups_per_iteration
    for row in rows:
        for key in ("async/dropped_groups", "async/carried_groups", "async/wait_s", "async/engine_idle_frac",
                    "async/staleness_mean", "async/staleness_max"):
            assert key in row, key
        hist = [row[f"async/staleness_{k}"] for k in range(s + 1)]
        assert sum(hist) == per_iteration  # every taken group counted once, none older than S
        assert row["async/staleness_max"] <= s
    # the workers ran ahead: some group trained in iterations ≥ 1 was sampled by an older policy
    assert any(row["async/staleness_max"] >= 1 for row in rows[1:])
    with TurnStore(result.store_path, readonly=True) as store:
        episodes = store.load_episodes(result.run_id)
    assert len({e.episode_id for e in episodes}) == len(episodes) == 4 * per_iteration * cfg.rollout.group_size


def test_max_staleness_needs_engine_workers(tiny_dir):
    raw = {"env": {"id": "agentrl/Toy-v0"}, "policy": {"model": str(tiny_dir)}, "rollout": {"max_staleness": 1}}
    with pytest.raises(ConfigError, match="needs engine workers apart from the trainer"):
        config_from_dict(raw)
    # Ray engine actors stream too (issue 37; tests/distributed/test_engines_broadcast.py)
    assert config_from_dict({**raw, "rollout": {"max_staleness": 1, "engines": 1, "backend": "ray"}}).rollout.engines == 1
    with pytest.raises(ConfigError, match="rollout.max_staleness must be >= 0"):
        config_from_dict({**raw, "rollout": {"max_staleness": -1}})


def test_a_resumed_asynchronous_run_produces_after_the_stored_ids(tiny_dir, tmp_path):
    from agentrl.train import train

    cfg = _cfg(tiny_dir, tmp_path, name="s1-resume", iterations=2, rollout__engines=1, rollout__max_staleness=1,
               run__eval_every=0, run__seed=0, update__rollout_correction="tis")
    first = train(cfg, resume=False)
    more = train(config_from_dict({**_raw(cfg), "run": {**_raw(cfg)["run"], "iterations": 3}}), resume=True)
    assert first.state.iteration == 2 and more.state.iteration == 3 and more.state.policy_version == 3
    trained, episodes = _trained(more)
    assert len({e.episode_id for e in episodes}) == len(episodes) == 3 * 2 * 4  # no id stored twice
    assert all(0 <= it - 1 - v <= 1 for it, v in trained.values())  # 1-based iteration k trains at version k − 1
    rows = [json.loads(x) for x in (more.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any("correction/kl" in r for r in rows)  # the correction ran in some update phase
    assert all(r["correction/kl"] >= 0 for r in rows if "correction/kl" in r)


def _raw(cfg):
    from agentrl.config import to_dict

    return to_dict(cfg)


def test_bf16_asynchronous_run_keeps_the_bound_and_corrects(tiny_dir, tmp_path):
    """The same mechanism in bf16 (weights published to bf16 engine workers, turns within S, the
    correction's metrics logged)."""
    cfg = _cfg(tiny_dir, tmp_path, name="s1-bf16", iterations=2, rollout__engines=1, rollout__max_staleness=1,
               run__eval_every=0, run__seed=0, policy__dtype="bfloat16", update__rollout_correction="tis")
    result = _train(cfg)
    assert result.state.iteration == 2 and result.state.policy_version == 2
    trained, episodes = _trained(result)
    assert trained and all(0 <= it - 1 - v <= 1 for it, v in trained.values())
    rows = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all(r["async/staleness_max"] <= 1 for r in rows) and any("correction/kl" in r for r in rows)


def test_a_crash_in_an_asynchronous_iteration_is_replayed_exactly_once(tiny_dir, tmp_path, monkeypatch):
    """Issue 52, defect 4: with max_staleness 1 the run dies after iteration 2 stored its episodes,
    before its checkpoint. Those episodes may all be sampled at an older version than the
    iteration-1 checkpoint's (the staleness allows it), so the old rule (move versions >= the
    checkpoint's) kept them and the resumed run held iteration 2 twice. The iteration tags move
    exactly what iteration 2 stored; the resumed run stores each iteration's 8 episodes once and
    credits each once."""
    import agentrl.train.loop as train_mod
    from e2e_crash import crash_before_checkpoint

    cfg = _cfg(tiny_dir, tmp_path, name="async-crash", iterations=3, rollout__engines=1, rollout__max_staleness=1,
               run__eval_every=0, run__seed=0, run__save_every=1)
    real_save = crash_before_checkpoint(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        train_mod.train(cfg, resume=False)
    monkeypatch.setattr(train_mod, "save_checkpoint", real_save)
    resumed = train_mod.train(cfg, resume=True)
    assert resumed.state.iteration == 3
    with TurnStore(resumed.store_path, readonly=True) as store:
        kept = store.load_episodes("async-crash")
        (lost,) = [r for r in store.runs() if r.startswith("async-crash.interrupted-")]
        assert len(store.episodes(lost)) == 8  # what the interrupted iteration 2 stored
        adv = store.advantages("async-crash")
    assert sorted(e.episode_id for e in kept) == list(range(24))  # each production's 2 groups x 4, once
    turns_of = {it: [a.turn_id for a in adv if a.iteration == it] for it in (1, 2, 3)}
    for it, turns in turns_of.items():  # iteration k (1-based) credits 8 episodes' turns, each once
        assert len(turns) == len(set(turns)) > 0
    credited = [t for turns in turns_of.values() for t in turns]
    assert len(credited) == len(set(credited)) == sum(len(e.turns) for e in kept)  # every stored turn once

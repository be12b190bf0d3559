"""End-to-end: 3SPO (``threespo``) through the whole training loop with the tiny random model on the
toy env. Each iteration the trainer fills ``TurnTable.state_stats`` from the run's store (the per-state
success statistics of the earlier iterations, ALGORITHMS.md §16, D-16) before the estimator runs;
the stored advantages equal the estimator on that column, recomputed from the store afterwards."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from e2e_crash import crash_before_checkpoint  # noqa: E402

from agentrl.config import config_from_dict  # noqa: E402
from agentrl.credit import compute_advantages  # noqa: E402
from agentrl.store import TurnStore, state_success_stats, with_state_stats  # noqa: E402


def _cfg(tiny_dir, out_dir, iterations=2, name="spo3"):
    return config_from_dict({
        "run": {"name": name, "out_dir": str(out_dir), "iterations": iterations, "eval_every": 0, "save_every": 1,
                "seed": 3},
        "env": {"id": "agentrl/Toy-v0", "max_turns": 8, "split": "train"},
        "policy": {"model": str(tiny_dir), "max_tokens": 8, "action_format": "whole",
                   "action_constraint": "admissible"},
        "rollout": {"groups_per_iteration": 2, "group_size": 4, "num_workers": 1},
        "algorithm": {"estimator": "threespo", "kwargs": {"alpha": 1.0, "episode_advantage_w": 0.5}},
        "update": {"lr": 1e-2, "micro_batch": 4, "epochs": 1},
        "log": {"console": False},
    })


def test_threespo_trains_with_statistics_from_the_store(tiny_dir, tmp_path):
    from agentrl.train import train

    result = train(_cfg(tiny_dir, tmp_path), resume=False)
    assert result.state.iteration == 2
    with TurnStore(result.store_path, readonly=True) as store:
        for k in (1, 2):
            stored = store.advantages(result.run_id, iteration=k, estimator="threespo")
            ids = sorted({a.turn_id for a in stored})
            eps = sorted({e.episode_id for e in store.episodes(result.run_id)
                          if any(t.turn_id in ids for t in store.turns(e.episode_id, result.run_id))})
            table = with_state_stats(store, result.run_id, store.table(result.run_id, eps), k)
            assert len(stored) == len(table) > 0
            # iteration 1 sees no earlier episode; iteration 2 sees iteration 1's 8 episodes
            stats = state_success_stats(store, result.run_id, k, table.anchor_vocab)
            assert stats.t == 1 + (0 if k == 1 else 8) == int(table.state_stats[0, 4])
            assert (k == 1) == (table.state_stats[:, 0].max() == 0)
            want = compute_advantages(table, "threespo", alpha=1.0, episode_advantage_w=0.5)
            got = dict((a.turn_id, a.value) for a in stored)
            np.testing.assert_allclose([got[i] for i in table.turn_id], want, atol=1e-12, rtol=0)
            if k == 2:  # the viewer's breakdown reads the same statistics and reproduces every stored value
                _check_viewer(result, table, got)


def _check_viewer(result, table, got):
    import sqlite3

    from agentrl.view.explain import explain_group

    conn = sqlite3.connect(result.store_path)
    try:
        key = conn.execute("SELECT run_key FROM runs WHERE run_id = ?", (result.run_id,)).fetchone()[0]
        for g in np.unique(table.group):
            rows = table.group == g
            expl = explain_group(conn, result.store_path, result.run_id, key, int(g), "threespo",
                                 {int(i): got[int(i)] for i in table.turn_id[rows]})
            assert expl.note is None and expl.n_mismatch == 0
            assert expl.kwargs["alpha"] == 1.0 and expl.kwargs["episode_advantage_w"] == 0.5
            assert len(expl.turns) == int(rows.sum()) and all(e.matches for e in expl.turns.values())
            assert [n for n, _ in next(iter(expl.turns.values())).extras] == ["step reward R", "S(s_t)", "S(s_t+1)",
                                                                             "w_t"]
    finally:
        conn.close()


def _stored(store, run_id):
    return [(a.turn_id, a.iteration, a.value) for a in store.advantages(run_id)]


def test_threespo_resumed_after_a_crash_equals_uninterrupted_and_no_resume_starts_empty(tiny_dir, tmp_path,
                                                                                        monkeypatch):
    """D-16 through the trainer: a run that dies after iteration 2's advantages are stored but before its
    checkpoint, resumed to 3 iterations, stores exactly the advantages of an uninterrupted run (iteration
    3 reads iterations 1-2's statistics; the interrupted copy of iteration 2 moved aside never counts);
    ``--no-resume`` in the same folder starts with empty statistics again."""
    import agentrl.train.loop as train_mod

    reference = train_mod.train(_cfg(tiny_dir, tmp_path, iterations=3, name="ref"), resume=False)
    real_save = crash_before_checkpoint(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        train_mod.train(_cfg(tiny_dir, tmp_path, iterations=3, name="crash"), resume=False)
    monkeypatch.setattr(train_mod, "save_checkpoint", real_save)
    resumed = train_mod.train(_cfg(tiny_dir, tmp_path, iterations=3, name="crash"), resume=True)
    with TurnStore(reference.store_path, readonly=True) as a, TurnStore(resumed.store_path, readonly=True) as b:
        assert any(r.startswith("crash.interrupted-") for r in b.runs())
        assert _stored(a, "ref") == _stored(b, "crash") and len(_stored(a, "ref")) > 0
        for k in (1, 2, 3, 4):
            sa = state_success_stats(a, "ref", k, a.table("ref").anchor_vocab)
            sb = state_success_stats(b, "crash", k, a.table("ref").anchor_vocab)
            assert sa.t == sb.t == 1 + 8 * (k - 1)
            assert sa.n_total.tolist() == sb.n_total.tolist() and sa.n_success.tolist() == sb.n_success.tolist()
    fresh = train_mod.train(_cfg(tiny_dir, tmp_path, iterations=1, name="crash"), resume=False)  # --no-resume
    with TurnStore(fresh.store_path, readonly=True) as c, TurnStore(reference.store_path, readonly=True) as a:
        assert state_success_stats(c, "crash", 1, ["x"]).t == 1 and state_success_stats(c, "crash", 2, ["x"]).t == 9
        assert _stored(c, "crash") == [x for x in _stored(a, "ref") if x[1] == 1]  # as a first iteration again

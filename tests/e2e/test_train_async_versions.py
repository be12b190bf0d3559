"""End-to-end (issue 37): the staleness-aware group metric on a ``rollout.max_staleness: 2`` run,
with ``algorithm.group_by_version: true``.

Every iteration logs ``adv/groups_span_versions`` and its kin (``agentrl.credit.versions``); the
logged values equal a recomputation from the run's store (the episodes trained at that
iteration), the version span inside a group never exceeds S, and the stored advantages are the
estimator's per-version ones. Whether a group actually spans versions depends on timing (a
group's episodes start in one generation round unless its shard waited behind another shard's
episodes and a weight load fell in between), so the test checks the recomputation, not a value.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_train_loop import _cfg  # noqa: E402

from agentrl.credit import compute_advantages, version_mixing  # noqa: E402
from agentrl.store import TurnStore  # noqa: E402

KEYS = ("adv/groups_span_versions", "adv/groups_span_turn_versions", "adv/anchor_groups_span_versions",
        "adv/turns_in_version_spanning_groups", "adv/group_version_span_max")


def test_version_mixing_is_logged_and_recomputed_from_the_store(tiny_dir, tmp_path):
    from agentrl.train import train

    s = 2
    cfg = _cfg(tiny_dir, tmp_path, name="s2-versions", iterations=4, rollout__engines=1, rollout__max_staleness=s,
               run__eval_every=0, algorithm__group_by_version=True)
    result = train(cfg, resume=False)
    rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 4
    with TurnStore(result.store_path, readonly=True) as store:
        episode_of = {t.turn_id: e.episode_id for e in store.load_episodes(result.run_id) for t in e.turns}
        for k, row in enumerate(rows, start=1):
            adv = {a.turn_id: a.value for a in store.advantages(result.run_id, iteration=k)}
            table = store.table(result.run_id, episode_ids=sorted({episode_of[t] for t in adv}))
            want = version_mixing(table).as_metrics()
            assert {key: row[key] for key in KEYS} == want, k
            assert row["adv/group_version_span_max"] <= s  # no group trained beyond S versions
            assert row["adv/groups_span_versions"] <= row["adv/groups_span_turn_versions"]
            per = compute_advantages(table, cfg.algorithm.estimator, group_by_version=True, **cfg.algorithm.kwargs)
            np.testing.assert_array_equal(np.array([adv[t] for t in table.turn_id]), per)

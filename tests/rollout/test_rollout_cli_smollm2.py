"""``agentrl rollout`` with SmolLM2 on real TextWorld games (slow: CPU, the packaged model)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_rollout_cli_smollm2_textworld_8_games_group_4(smollm2_dir, tmp_path):
    pytest.importorskip("textworld")
    from agentrl.store import TurnStore
    from agentrl.types import EpisodeStatus

    db = tmp_path / "tw.db"
    cmd = [sys.executable, "-m", "agentrl", "rollout", "agentrl/TextWorld-v0", "--policy", "smollm2-135m-instruct",
           "--episodes", "32", "--group", "4", "--store", str(db), "--run", "smol", "--max-turns", "2",
           "--max-tokens", "16"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1700)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "stored 32 episodes" in " ".join(proc.stdout.split())
    with TurnStore(db) as store:
        eps = store.load_episodes("smol")
    assert len(eps) == 32 and sorted(e.episode_id for e in eps) == list(range(32))
    assert all(e.status == EpisodeStatus.OK for e in eps)
    for g in range(8):
        members = [e for e in eps if e.group_id == g]
        assert len(members) == 4 and len({e.seed for e in members}) == 1 and len({e.task_id for e in members}) == 1
    for e in eps:
        assert 1 <= len(e.turns) <= 2 and (e.turns[-1].terminated or e.turns[-1].truncated)
        for t in e.turns:
            assert 1 <= t.completion_ids.size <= 16 and t.completion_logprobs.size == t.completion_ids.size
            assert np.all(t.completion_logprobs <= 0) and t.anchor_obs
        if len(e.turns) == 2:  # chat context: exact prefix extension survives the store round trip
            before = np.concatenate([e.turns[0].prompt_ids, e.turns[0].completion_ids])
            np.testing.assert_array_equal(e.turns[1].prompt_ids[: before.size], before)

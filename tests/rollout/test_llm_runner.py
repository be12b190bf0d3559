"""``agentrl rollout --policy <HF folder>`` goes through the LLM runner and the collector."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")


def test_cli_rollout_with_tiny_model_folder(tiny_dir, tmp_path):
    from agentrl.cli import main
    from agentrl.store import TurnStore

    db = tmp_path / "t.db"
    rc = main(["rollout", "agentrl/Toy-v0", "--policy", str(tiny_dir), "--episodes", "4", "--group", "2",
               "--store", str(db), "--run", "tiny", "--max-turns", "2", "--max-tokens", "8", "--workers", "1",
               "--context", "window", "--action-format", "whole"])
    assert rc == 0
    with TurnStore(db) as store:
        eps = store.load_episodes("tiny")
        assert store.tokenizer("tiny") == str(tiny_dir)  # recorded, so replay decodes the completions
    assert sorted(e.episode_id for e in eps) == [0, 1, 2, 3]
    assert [e.group_id for e in sorted(eps, key=lambda e: e.episode_id)] == [0, 0, 1, 1]
    for e in eps:
        assert len(e.turns) == 2 and e.turns[-1].truncated
        for t in e.turns:
            assert 1 <= t.completion_ids.size <= 8 and t.completion_logprobs.size == t.completion_ids.size
            assert np.all(np.isfinite(t.completion_logprobs))


def test_unknown_policy_name_is_a_clear_error(tmp_path, capsys):
    from agentrl.cli import main

    rc = main(["rollout", "agentrl/Toy-v0", "--policy", "smolm2", "--episodes", "1", "--store", str(tmp_path / "x.db")])
    assert rc == 2
    assert "did you mean" in capsys.readouterr().err

"""Judge rewards through the whole training loop (issue 53): the policy judging its own
episodes under a JSON-schema grammar, its record stored with each episode; a judge that times
out on some episodes flags them ``judge_error`` and they are excluded while the rest trains."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from agentrl.store import TurnStore  # noqa: E402
from agentrl.types import EpisodeStatus  # noqa: E402


def _cfg(tiny_dir, out_dir, judge):
    from agentrl.config import config_from_dict

    return config_from_dict({
        "run": {"name": "judged", "out_dir": str(out_dir), "iterations": 1, "eval_every": 0, "save_every": 1,
                "seed": 3},
        "env": {"id": "agentrl/Toy-v0", "max_turns": 4, "split": "train"},
        "policy": {"model": str(tiny_dir), "max_tokens": 8, "action_format": "whole",
                   "action_constraint": "admissible"},
        "rollout": {"groups_per_iteration": 2, "group_size": 4, "num_workers": 1, "min_group_valid": 1},
        "algorithm": {"estimator": "grpo"},
        "update": {"lr": 1e-2, "micro_batch": 4, "epochs": 1},
        "reward": {"judge": judge},
        "log": {"console": False},
    })


def _stored(result):
    with TurnStore(result.store_path, readonly=True) as store:
        eps = store.episodes(result.run_id)
        last = {e.episode_id: store.turns(e.episode_id, run_id=result.run_id)[-1] for e in eps if e.n_turns}
        adv = store.advantages(result.run_id)
        table = store.table(run_id=result.run_id)
    row = json.loads((result.run_dir / "metrics.jsonl").read_text().splitlines()[0])
    return eps, last, adv, table, row


def test_the_policy_judges_its_own_episodes(tiny_dir, tmp_path):
    from agentrl.train import train

    result = train(_cfg(tiny_dir, tmp_path, {"endpoint": "policy", "max_tokens": 12}), resume=False)
    eps, last, _, _, row = _stored(result)
    assert len(eps) == 8 and all(e.status == EpisodeStatus.OK for e in eps)
    for e in eps:
        rec = last[e.episode_id].info["judge"]
        assert json.loads(rec["reply"])["verdict"] in ("pass", "fail") and rec["endpoint"] == "policy"
        assert e.return_ == rec["score"] and "Transcript:" in rec["prompt"]  # replace: the judge's score is the return
    assert row["judge/episodes"] == 8.0 and row["judge/errors"] == 0.0
    assert row["judge/calls"] + row["judge/cache_hits"] == 8.0


def test_a_judge_timeout_flags_judge_error_and_excludes_the_episode(tiny_dir, tmp_path, monkeypatch):
    from agentrl.rollout.judge import Judge
    from agentrl.train import loop, train

    class FirstCallHangs:
        name = "scripted"

        def __init__(self):
            self.calls = 0

        def complete(self, messages, schema, max_tokens):
            self.calls += 1
            if self.calls == 1:
                time.sleep(1.5)
            return '{"verdict": "pass"}' if "take key" in messages[0]["content"] else '{"verdict": "fail"}'

    monkeypatch.setattr(loop, "open_judge", lambda cfg, policy: Judge(cfg.reward.judge, FirstCallHangs()))
    cfg = _cfg(tiny_dir, tmp_path, {"endpoint": "policy", "timeout_s": 0.5, "retries": 0, "concurrency": 1})
    result = train(cfg, resume=False)
    eps, last, adv, table, row = _stored(result)
    bad = [e for e in eps if e.status != EpisodeStatus.OK]
    assert bad and all(e.status == EpisodeStatus.ENV_ERROR and e.cause == "judge_error" for e in bad)
    assert all("no verdict within 0.5 s" in e.error and e.return_ is not None for e in bad)  # never scored 0 by the judge
    assert row["judge/errors"] == float(len(bad)) == row["rollout/episodes_excluded/judge_error"]
    value = {r.turn_id: r.value for r in adv}
    for e, tid in zip(table.episode.tolist(), table.turn_id.tolist()):
        if e in {b.episode_id for b in bad}:
            assert value[tid] == 0.0
    assert np.isfinite(row["judge/mean_score"]) and len(bad) < len(eps)

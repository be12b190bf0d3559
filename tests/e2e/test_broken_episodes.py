"""Never train on a broken episode (issue 53), through the whole loop: a harness that loses a
model call and swallows the error is excluded with its cause, a group left with one valid
member is dropped with its metric, and the rest of the iteration trains."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("openai", reason="needs the dev extra (openai SDK)")

from agentrl.store import TurnStore  # noqa: E402
from agentrl.types import EpisodeStatus  # noqa: E402

HERE = Path(__file__).resolve().parent


def test_a_lost_model_call_excludes_its_episode_and_a_thin_group_is_dropped(tiny_dir, tmp_path):
    from agentrl.config import config_from_dict
    from agentrl.train import train

    cfg = config_from_dict({
        "run": {"name": "broken", "out_dir": str(tmp_path / "runs"), "iterations": 1, "eval_every": 0,
                "save_every": 1, "seed": 4},
        "env": {"id": "agentrl/Toy-v0", "max_turns": 12},
        "policy": {"model": str(tiny_dir), "max_tokens": 4},
        "rollout": {"groups_per_iteration": 2, "group_size": 3, "min_group_valid": 2,
                    "harness": {"command": ["{python}", str(HERE / "broken_call_agent.py"), "--roles-dir",
                                            str(tmp_path / "roles")], "timeout_s": 120, "max_parallel": 3}},
        "algorithm": {"estimator": "grpo"},
        "update": {"lr": 1e-3, "micro_batch": 4, "epochs": 1},
        "log": {"console": False},
    })
    result = train(cfg, resume=False)
    row = json.loads((result.run_dir / "metrics.jsonl").read_text().splitlines()[0])
    with TurnStore(result.store_path, readonly=True) as store:
        eps = store.episodes(result.run_id)
        table = store.table(run_id=result.run_id)
        adv = store.advantages(result.run_id)
    assert len(eps) == 6
    broken = [e for e in eps if e.status != EpisodeStatus.OK]
    assert len(broken) == 3 and all(e.status == EpisodeStatus.ABORTED and e.cause == "model_call_failed"
                                    for e in broken)
    assert all("answered 400" in e.error and "context" in e.error for e in broken)
    assert row["rollout/episodes_excluded"] == 3.0 and row["rollout/episodes_excluded/model_call_failed"] == 3.0
    assert row["rollout/groups_dropped"] == 1.0 and row["rollout/episodes_dropped"] == 1.0
    # each broken episode played to the end and kept its turns (unscored, visible in the store); no credit
    assert all(e.n_turns > 0 and e.return_ is None for e in broken)
    by_row = dict(zip(table.turn_id.tolist(), table.episode.tolist()))
    a = {ep: [] for ep in set(table.episode.tolist())}
    for r in adv:
        a[by_row[r.turn_id]].append(r.value)
    seeds = {e.group_id: e.seed for e in eps}
    kept_group = next(g for g, s in seeds.items() if s % 2 == 0)
    for e in eps:
        values = np.asarray(a[e.episode_id])
        if e.status != EpisodeStatus.OK or e.group_id != kept_group:  # excluded, or the dropped group's survivor
            assert np.all(values == 0.0), (e.episode_id, e.status, values)
        else:  # the kept group: its winner above its loser
            assert np.all(values > 0) if e.success else np.all(values < 0)
    assert row["update/steps"] >= 1.0  # the rest trained
    # the proxy's recorded logprobs against the trainer's recompute of the trained tokens (fp32, in process)
    assert row["proxy/logprob_corr"] > 0.999 and row["proxy/logprob_mae"] < 1e-4


def _episode(eid, group, status=EpisodeStatus.OK, error=""):
    from agentrl.types import Episode, Turn

    ep = Episode(episode_id=eid, group_id=group, env_id="e", task_id="x", seed=group, status=status, error=error)
    ep.turns = [Turn(run_id="r", episode_id=eid, group_id=group, t=0, observation="o", anchor_obs="o", action="a",
                     action_valid=True, reward=float(eid % 2), prompt_ids=np.array([1]), completion_ids=np.array([2]),
                     completion_logprobs=np.array([-1.0], np.float32), terminated=True)]
    return ep


@pytest.mark.parametrize("min_valid, dropped, lost", [(1, (2,), 0), (2, (1, 2), 1), (3, (1, 2), 1)])
def test_drop_thin_groups_by_hand(min_valid, dropped, lost):
    """Group 0: 3 ok (it lost nobody, so it stays at any min_valid); group 1: 1 ok + 1 aborted;
    group 2: 1 aborted and 1 env_error with no turn at all (it still counts as a member)."""
    from agentrl.train.exclusion import drop_thin_groups, excluded_by_cause
    from agentrl.types import TurnTable

    bad = EpisodeStatus.ABORTED
    eps = [_episode(0, 0), _episode(1, 0), _episode(2, 0), _episode(3, 1), _episode(4, 1, bad, "[harness_exit] x"),
           _episode(5, 2, bad, "[client_disconnected] y"), _episode(6, 2, EpisodeStatus.ENV_ERROR, "boom")]
    eps[6].turns = []
    table = TurnTable.from_episodes(eps)
    out, drop = drop_thin_groups(table, eps, min_valid)
    assert drop.groups == dropped and drop.episodes == lost
    assert out.episode_ok.tolist() == [True, True, True, 1 not in dropped, False, False]
    assert table.episode_ok.tolist() == [True, True, True, True, False, False]  # the input is not changed
    assert drop.as_metrics() == {"rollout/groups_dropped": float(len(dropped)),
                                 "rollout/episodes_dropped": float(drop.episodes)}
    assert excluded_by_cause(eps) == {"rollout/episodes_excluded": 3.0,
                                      "rollout/episodes_excluded/client_disconnected": 1.0,
                                      "rollout/episodes_excluded/env_error": 1.0,
                                      "rollout/episodes_excluded/harness_exit": 1.0}
    assert excluded_by_cause(eps[:4]) == {}
    with pytest.raises(ValueError, match="min_group_valid must be >= 1"):
        drop_thin_groups(table, eps, 0)

"""``proxy_metrics``: the proxy's per-turn fidelity records (fork, cause, segment,
token_prefix_ok) summed into run metrics, on hand-built episodes."""

from __future__ import annotations

import math

import numpy as np

from agentrl.rollout.stats import proxy_metrics
from agentrl.types import Episode, Turn


def _turn(eid: int, t: int, **info) -> Turn:
    z = np.zeros(1, np.int64)
    return Turn(run_id="", episode_id=eid, group_id=0, t=t, observation="o", anchor_obs="o", action="a",
                action_valid=True, reward=0.0, prompt_ids=z, completion_ids=z,
                completion_logprobs=np.zeros(1, np.float32), info=info)


def test_drift_segments_and_forks_by_cause_hand_counted():
    a = Episode(episode_id=0, group_id=0, env_id="toy", task_id="t", seed=0)
    a.turns = [_turn(0, 0, cause="first", fork=False, segment=0, token_prefix_ok=True),
               _turn(0, 1, cause="rewritten", fork=True, segment=1, token_prefix_ok=False),
               _turn(0, 2, cause="extends", fork=False, segment=1, token_prefix_ok=True)]
    b = Episode(episode_id=1, group_id=0, env_id="toy", task_id="t", seed=0)
    b.turns = [_turn(1, 0, cause="first", fork=False, segment=0),  # drift not measured
               _turn(1, 1, cause="rewritten", fork=True, segment=1, token_prefix_ok=None),
               _turn(1, 2, cause="new_thread", fork=True, segment=2, token_prefix_ok=True)]
    m = proxy_metrics([a, b])
    assert m["proxy/drift_rate"] == 1 / 4  # 4 measured turns, one not a prefix extension
    assert m["proxy/segments_per_episode"] == (2 + 3) / 2
    assert m["proxy/forks"] == 3 and m["proxy/forks/rewritten"] == 2 and m["proxy/forks/new_thread"] == 1
    agent_loop = Episode(episode_id=2, group_id=0, env_id="toy", task_id="t", seed=0)
    agent_loop.turns = [_turn(2, 0)]
    assert proxy_metrics([agent_loop]) == {}  # nothing proxied: no proxy metrics
    lone = Episode(episode_id=3, group_id=0, env_id="toy", task_id="t", seed=0,
                   turns=[_turn(3, 0, cause="first", fork=False, segment=0)])
    unmeasured = proxy_metrics([lone])
    assert math.isnan(unmeasured["proxy/drift_rate"]) and unmeasured["proxy/forks"] == 0

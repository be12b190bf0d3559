"""Helpers of the viewer tests: a small hand-built store whose every shown value is known.

Run ``hand`` holds two groups:

- group 0 (``agentrl/Toy-v0``, task ``t0``): episode 0 wins (rewards 0, 1; policy v0) and
  episode 1 loses (rewards 0, 0; policy v1). Anchors: e0 = [A, B], e1 = [A, C], so turn
  e0:t0 and e1:t0 form an anchor group. Tokens: prompt [1, 2, 3], completion [4, 5] with
  logprobs [-0.5, -1.25].
- group 1 (``agentrl/Other-v0``, task ``t1``): episode 2 (3 turns, segments 0, 0, 1: a fork at
  t2) and episode 3, a branch whose first turn's parent is e2:t0 and whose status is
  ``env_error``.

Advantages: iteration 0 / ``grpo`` on group 0's turns (+0.5, -0.25, -0.5, +0.25 by turn order),
iteration 1 / ``gigpo`` on every turn (0.1 · (k + 1) · (-1)^k for the k-th turn).
Metrics: iterations 0 and 1 of ``rollout/success_rate`` (0.5, 0.25) and ``update/approx_kl``.
"""

from __future__ import annotations

from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import numpy as np

from agentrl.store import TurnStore
from agentrl.types import Episode, EpisodeStatus, Turn

GRPO = [0.5, -0.25, -0.5, 0.25]


def make_turn(t: int, anchor: str, reward: float, *, version: int = 0, won: bool = False, segment: int | None = None,
              parent: int | None = None) -> Turn:
    """A turn with 3 prompt and 2 completion tokens (ids 1..5, logprobs -0.5, -1.25)."""
    info = {"won": won} | ({} if segment is None else {"segment": segment})
    return Turn(run_id="", episode_id=-1, group_id=-1, t=t, observation=f"you see {anchor}", anchor_obs=anchor,
                action=f"act {t}", action_valid=t != 2, reward=reward, terminated=won,
                prompt_ids=np.array([1, 2, 3], np.int32), completion_ids=np.array([4, 5], np.int32),
                completion_logprobs=np.array([-0.5, -1.25], np.float32), policy_version=version,
                parent_turn_id=parent, info=info)


def make_episode(gid: int, env: str, task: str, turns: list[Turn], status=EpisodeStatus.OK) -> Episode:
    for tr in turns:
        tr.group_id = gid
    return Episode(episode_id=-1, group_id=gid, env_id=env, task_id=task, seed=gid, status=status, turns=turns,
                   error="" if status == EpisodeStatus.OK else "worker died")


@dataclass(frozen=True)
class HandStore:
    """The hand store's path and the turn ids of each episode (by t)."""

    path: Path
    turn_ids: dict[int, list[int]]

    def all_turn_ids(self) -> list[int]:
        return [t for e in sorted(self.turn_ids) for t in self.turn_ids[e]]


def build_hand_store(path: Path) -> HandStore:
    with TurnStore(path) as store:
        e0 = make_episode(0, "agentrl/Toy-v0", "t0", [make_turn(0, "A", 0.0), make_turn(1, "B", 1.0, won=True)])
        e1 = make_episode(0, "agentrl/Toy-v0", "t0", [make_turn(0, "A", 0.0, version=1), make_turn(1, "C", 0.0, version=1)])
        e2 = make_episode(1, "agentrl/Other-v0", "t1", [make_turn(0, "X", 0.0, segment=0), make_turn(1, "Y", 0.0, segment=0),
                                                         make_turn(2, "Z", 0.5, segment=1)])
        store.add_episodes([e0, e1, e2], run_id="hand")
        e3 = make_episode(1, "agentrl/Other-v0", "t1", [make_turn(0, "Y", 0.0, parent=e2.turns[0].turn_id)],
                          status=EpisodeStatus.ENV_ERROR)
        store.add_episodes([e3], run_id="hand")
        ids = {ep.episode_id: [t.turn_id for t in ep.turns] for ep in (e0, e1, e2, e3)}
        hand = HandStore(path, ids)
        store.set_advantages("hand", ids[0] + ids[1], GRPO, 0, "grpo")
        every = hand.all_turn_ids()
        store.set_advantages("hand", every, [0.1 * (k + 1) * (-1) ** k for k in range(len(every))], 1, "gigpo")
        store.add_metrics("hand", 0, {"rollout/success_rate": 0.5, "update/approx_kl": 0.01})
        store.add_metrics("hand", 1, {"rollout/success_rate": 0.25, "update/approx_kl": 0.03})
    return hand


class _Collect(HTMLParser):
    def __init__(self, cls: str) -> None:
        super().__init__()
        self.cls, self.found = cls, []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if self.cls in (a.get("class") or "").split():
            self.found.append(a)


def elements(html: str, cls: str) -> list[dict[str, str]]:
    """Attributes of every element of ``html`` whose class list holds ``cls``, in order."""
    p = _Collect(cls)
    p.feed(html)
    return p.found

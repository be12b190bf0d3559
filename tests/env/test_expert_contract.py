"""Every registered env that declares an expert (``metadata["agentrl.expert_kwargs"]``) serves the
expert-Q check end to end: built with those kwargs its expert wins from reset (and the check's
V^E(s_0) of a replayed episode is that same continuation); replaying a random episode with
``expert_values`` reproduces every stored reward and anchor (the check's determinism premise)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from agentrl.env import make
from agentrl.env.expert import EXPERT_HOOK, META_EXPERT_KWARGS, expert_values, play_expert
from agentrl.env.registry import env_metadata, local_ids

NEEDS = {"TextWorld": "textworld", "ALFWorld": "alfworld", "WebShop": "bm25s"}


def _expert_ids() -> list[str]:
    out = []
    for env_id in local_ids():
        try:
            meta = env_metadata(env_id)
        except Exception:  # an extra this machine lacks: its own tests say so
            continue
        if META_EXPERT_KWARGS in meta:
            out.append(env_id)
    return out


EXPERT_IDS = _expert_ids()


def test_the_real_envs_declare_an_expert():
    for name in ("agentrl/TextWorld-CU1-v0", "agentrl/ALFWorld-v0", "agentrl/WebShop-v0"):
        extra = next(v for k, v in NEEDS.items() if k in name)
        if importlib.util.find_spec(extra) is not None:
            assert name in EXPERT_IDS


@pytest.mark.parametrize("env_id", EXPERT_IDS)
def test_expert_wins_from_reset_and_replays_exactly(env_id):
    extra = next((v for k, v in NEEDS.items() if k in env_id), None)
    if extra and importlib.util.find_spec(extra) is None:
        pytest.skip(f"needs {extra}")
    env = make(env_id, **env_metadata(env_id)[META_EXPERT_KWARGS], max_turns=80).unwrapped
    try:
        assert callable(getattr(env, EXPERT_HOOK))
        env.reset(seed=5)
        start = play_expert(env, 0.95, 60)
        assert start.won and start.ended and start.value > 0
        rng = np.random.default_rng(0)
        _, info = env.reset(seed=5)
        actions, rewards, anchors = [], [], []
        for _ in range(3):  # a random detour, recorded as a rollout would store it
            anchors.append(info["anchor_obs"])
            a = str(rng.choice(info["admissible_actions"]))
            if a.startswith("search["):
                a = "search[red shoes]"
            _, r, term, trunc, info = env.step(a)
            actions.append(a)
            rewards.append(r)
            if term or trunc:
                break
        ev = expert_values(env, actions, seed=5, rewards=rewards, anchors=anchors, terminated=bool(term),
                           gamma=0.95, max_expert_steps=60)
        assert ev.replay_mismatch == 0
        assert ev.v[0] == pytest.approx(start.value) and ev.won[0]
    finally:
        env.close()

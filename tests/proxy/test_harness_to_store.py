"""Harness episodes from the tiny HF policy go through the store into training inputs:
token-faithful segments with ``loss_mask == 1`` exactly on sampled tokens (PITFALLS P1–P3)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from agentrl.config import load_config
from agentrl.llm.base import SamplingParams
from agentrl.llm.chat import episode_segments
from agentrl.rollout.harness import HarnessSpec, collect_harness_episodes
from agentrl.store import TurnStore
from agentrl.types import EpisodeStatus

ROOT = Path(__file__).resolve().parents[2]


def test_harness_episodes_train_ready(tiny_engine, renderer, tmp_path):
    cfg = load_config(ROOT / "examples" / "harness_toy.yaml")
    # the program beside the config file, made absolute (whatever the working directory)
    assert cfg.rollout.harness.command[1] == str(ROOT / "examples" / "harness_agent.py") and cfg.env.id == "agentrl/Toy-v0"
    spec = HarnessSpec.from_config(cfg.rollout.harness, cfg.env.id)
    spec = replace(spec, cwd=str(ROOT), command=spec.command + ("--max-turns", "3", "--max-tokens", "12", "--window", "0"))
    eps = collect_harness_episodes(tiny_engine, renderer, spec, n_groups=2, group_size=2, seed=7, run_id="h",
                                   sampling=SamplingParams(temperature=1.0, max_tokens=12), max_parallel=4)
    assert all(e.status == EpisodeStatus.OK and len(e.turns) == 3 for e in eps), [e.error for e in eps]
    # the whole chat each call (--window 0), the replies echoed verbatim: one segment per episode, even where a
    # re-render drifts
    assert all(t.info["segment"] == 0 and t.info["prompt_source"] in ("rendered", "tito") for e in eps for t in e.turns)
    with TurnStore(tmp_path / "s.sqlite") as store:
        store.add_episodes(eps, run_id="h")
        table = store.table("h")
        stored = store.load_episodes("h")
    assert table.episode_ok.all() and table.trainable.all() and len(table) == 12
    for ep in stored:
        for a, b in zip(ep.turns, ep.turns[1:]):
            if b.info["segment"] == a.info["segment"]:
                head = np.concatenate([a.prompt_ids, a.completion_ids])
                assert np.array_equal(b.prompt_ids[: head.size], head)
        segs = episode_segments(ep.turns)
        sampled = np.concatenate([t.completion_ids for t in ep.turns])
        assert np.array_equal(np.concatenate([s.ids[s.loss_mask == 1] for s in segs]), sampled)
        for s in segs:
            lp = s.logprobs[s.loss_mask == 1]
            assert np.all(lp <= 0) and np.all(s.logprobs[s.loss_mask == 0] == 0)

"""A sampled held-out evaluation played by a harness repeats for the same seed (issue 53).

In-process sampled evaluation draws every (episode, turn) from its own seed (``CollectConfig.turn_seeds``);
through the proxy the harness's calls used to sample from the engine's stream, so the same evaluation
seed gave other episodes. Now each call of episode ``e`` samples from ``turn_seed(seed, e, call index)``
(``SessionRegistry.create(turn_seeds=...)``), batched with other calls without changing its draw.
"""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pytest
import torch

from agentrl.config import load_config
from agentrl.eval import evaluate
from agentrl.llm.base import SamplingParams, turn_seed
from agentrl.proxy.engine import EngineWorker, _batches, _Job

ROOT = Path(__file__).resolve().parents[2]


def _cfg(tiny_dir, max_parallel: int):
    return load_config(ROOT / "examples" / "harness_toy.yaml", [
        f"policy.model={tiny_dir}", "policy.lora=null", "policy.dtype=float32", "env.eval_panel_size=3",
        f"rollout.harness.max_parallel={max_parallel}",
        f"rollout.harness.command=['{{python}}', '{ROOT / 'examples' / 'harness_agent.py'}', '--max-turns', '4', "
        "'--max-tokens', '24', '--json-actions']"])


def _calls(episodes) -> list[tuple[int, int, tuple[int, ...], int | None]]:
    return [(e.episode_id, t.t, tuple(int(i) for i in t.completion_ids), t.info["sampling"]["seed"])
            for e in episodes for t in e.turns]


def test_sampled_harness_eval_repeats_for_the_same_seed_in_any_batch(tiny_engine, renderer, tiny_dir):
    torch.set_num_threads(1)
    _, a = evaluate(tiny_engine, renderer, _cfg(tiny_dir, 3), greedy=False, seed=11)  # 3 harnesses at once
    _, b = evaluate(tiny_engine, renderer, _cfg(tiny_dir, 1), greedy=False, seed=11)  # one at a time: batches of 1
    _, c = evaluate(tiny_engine, renderer, _cfg(tiny_dir, 3), greedy=False, seed=12)
    assert len(_calls(a)) >= 6 and _calls(a) == _calls(b)
    assert all(seed == turn_seed(11, e, t) for e, t, _, seed in _calls(a))  # call t of episode e (no retries here)
    assert [ids for *_, ids, _ in _calls(a)] != [ids for *_, ids, _ in _calls(c)]
    assert all(t.info["sampling"]["greedy"] is False for e in a for t in e.turns)


def test_greedy_harness_eval_records_no_seed(tiny_engine, renderer, tiny_dir):
    _, eps = evaluate(tiny_engine, renderer, _cfg(tiny_dir, 3), greedy=True, seed=11)
    assert eps and all(t.info["sampling"]["seed"] is None and t.info["sampling"]["greedy"] for e in eps for t in e.turns)


def _job(sampling: SamplingParams, top: int = 0) -> _Job:
    return _Job(np.array([1, 2], np.int32), sampling, Future(), top)


def test_row_seeded_calls_batch_together_and_seeded_ones_alone():
    row = [_job(SamplingParams(row_seeds=(s,))) for s in (5, 6, 7)]
    plain, seeded = _job(SamplingParams()), _job(SamplingParams(seed=3))
    other = _job(SamplingParams(temperature=0.5, row_seeds=(8,)))
    batches = _batches([row[0], plain, row[1], seeded, other, row[2]], max_batch=2)
    assert batches == [[row[0], row[1]], [plain], [seeded], [other], [row[2]]]


class _Recorder:
    """An engine that records the sampling of each ``generate`` call."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, SamplingParams]] = []

    def generate(self, prompts, sampling, **kw):
        self.calls.append((len(prompts), sampling))
        return [f"out{i}" for i in range(len(prompts))]


def test_the_worker_hands_each_row_its_own_seed():
    rec = _Recorder()
    worker = EngineWorker(rec, max_batch=8)
    try:
        worker._run([_job(SamplingParams(row_seeds=(s,))) for s in (9, 4, 7)])
    finally:
        worker.close()
    assert rec.calls == [(3, SamplingParams(row_seeds=(9, 4, 7)))]


@pytest.mark.parametrize("greedy", [True, False])
def test_a_session_seeds_each_call(greedy):
    from agentrl.proxy.sessions import SessionRegistry

    s = SessionRegistry("r").create(episode_id=4, turn_seeds=21)
    base = SamplingParams(greedy=greedy, seed=99)
    got = s.effective(base)
    assert got == (base if greedy else SamplingParams(greedy=False, row_seeds=(turn_seed(21, 4, 0),)))
    s.calls = 2
    assert greedy or s.effective(base).row_seeds == (turn_seed(21, 4, 2),)

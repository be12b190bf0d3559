"""Rollout engine workers as local processes (``rollout.engines``, ``ProcessEngineWorkers``).

Per-row seeded sampling first (no processes): the Gumbel-max sampler draws exactly from
softmax(top_p(logits / T)); a row's tokens do not depend on the batch; a sharded collect
with per-turn seeds equals the whole one. Then the workers (2 spawned processes + 1, the
tiny model, the toy env): 1 vs 2 workers → the same TurnTable, a pushed update reaches
every worker, a killed worker is restarted and its episodes come back aborted.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine_worker_checks as checks   # noqa: E402

from agentrl.llm.base import SamplingParams   # noqa: E402
from agentrl.llm.chat import ChatRenderer   # noqa: E402
from agentrl.llm.row_sampling import RowGumbelSampler   # noqa: E402
from agentrl.rollout.collector import collect, turn_seed   # noqa: E402
from agentrl.rollout.engines.interface import aborted_episodes, shard_config, shard_groups  # noqa: E402
from agentrl.rollout.engines.procs import ProcessEngineWorkers   # noqa: E402


def _exact(scores: torch.Tensor, temperature: float, top_p: float) -> np.ndarray:
    """softmax(top_p(scores / T)) with transformers' own warpers (the do_sample path)."""
    from transformers import TemperatureLogitsWarper, TopPLogitsWarper

    s = TopPLogitsWarper(top_p)(None, TemperatureLogitsWarper(temperature)(None, scores[None].clone()))
    return s.softmax(-1)[0].numpy()


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_row_gumbel_sampler_draws_exactly_the_warped_softmax(temperature, top_p):
    torch.manual_seed(0)
    scores = torch.randn(12) * 1.5  # (V,)
    n = 40_000
    proc = RowGumbelSampler(range(n), temperature, top_p, torch.device("cpu"))
    ids = proc(None, scores.expand(n, -1).clone()).argmax(-1).numpy()  # (n,) one draw per seed
    freq = np.bincount(ids, minlength=12) / n
    p = _exact(scores, temperature, top_p)
    assert np.all(freq[p == 0] == 0)  # ids cut by top-p are never drawn
    assert 0.5 * np.abs(freq - p).sum() < 0.015  # total variation (sampling noise ~0.005)
    again = RowGumbelSampler(range(n), temperature, top_p, torch.device("cpu"))(None, scores.expand(n, -1).clone())
    np.testing.assert_array_equal(again.argmax(-1).numpy(), ids)  # same seeds, same draws


def test_row_seeds_make_a_row_independent_of_its_batch(tiny_engine):
    a, b, c = [5, 17, 99, 3], [250, 41, 7, 7, 8, 9, 10], [300, 12]
    sp = SamplingParams(max_tokens=10, temperature=1.0, top_p=0.95)
    alone = tiny_engine.generate([a], replace(sp, row_seeds=(123,)))[0]
    batched = tiny_engine.generate([b, a, c], replace(sp, row_seeds=(9, 123, 4)))
    np.testing.assert_array_equal(alone.token_ids, batched[1].token_ids)
    np.testing.assert_allclose(alone.logprobs, batched[1].logprobs, atol=1e-5)
    # stored logprobs are the raw-logit ones, as without row seeds
    np.testing.assert_allclose(tiny_engine.score(a, alone.token_ids), alone.logprobs, atol=1e-5)
    others = [tiny_engine.generate([a], replace(sp, row_seeds=(s,)))[0].token_ids.tolist() for s in range(6)]
    assert len({tuple(o) for o in others}) > 1  # other seeds, other tokens
    with pytest.raises(ValueError, match="one per prompt"):
        tiny_engine.generate([a, b], replace(sp, row_seeds=(1,)))


def test_sharded_collect_with_turn_seeds_equals_the_whole(tiny_engine, tiny_tokenizer):
    renderer = ChatRenderer(tiny_tokenizer)
    cc = replace(checks.toy_config(), turn_seeds=True)
    whole = collect(tiny_engine, renderer, cc)
    parts = collect(tiny_engine, renderer, replace(cc, groups=(0,))) + collect(
        tiny_engine, renderer, replace(cc, groups=(1, 2), num_slots=1))
    assert [e.episode_id for e in parts] == [e.episode_id for e in whole] == list(range(6))
    for x, y in zip(whole, parts):
        assert [t.completion_ids.tolist() for t in x.turns] == [t.completion_ids.tolist() for t in y.turns]
    assert turn_seed(1, 2, 3) == turn_seed(1, 2, 3) != turn_seed(1, 3, 2)


def test_shards_keep_groups_whole_and_abort_what_is_missing():
    assert shard_groups(5, 2) == [(0, 1, 2), (3, 4)]
    assert shard_groups(1, 3) == [(0,), (), ()]
    cc = shard_config(checks.toy_config(n_groups=4), (2, 3))
    assert cc.turn_seeds and cc.n_played == 4
    lost = aborted_episodes(cc, {4, 7}, "worker died")
    assert [e.episode_id for e in lost] == [5, 6] and [e.group_id for e in lost] == [2, 3]
    assert all(e.status == "aborted" and e.error == "worker died" for e in lost)
    with pytest.raises(ValueError, match="sampling seed"):
        shard_config(replace(checks.toy_config(), sampling=SamplingParams(seed=None)), (0,))


@pytest.fixture(scope="module")
def workers(tiny_dir):
    state = checks.initial_state(tiny_dir)
    one = ProcessEngineWorkers(1, checks.spec_of(tiny_dir), state, 0)
    two = ProcessEngineWorkers(2, checks.spec_of(tiny_dir), state, 0)
    yield one, two
    one.close()
    two.close()


def test_one_and_two_workers_give_the_same_turn_table(workers, tmp_path):
    assert checks.check_same_table(*workers, tmp_path) > 6


def test_pushed_update_reaches_every_worker(workers, tiny_dir):
    assert checks.check_push(workers[1], tiny_dir) <= 1e-4


def test_pushed_lora_update_reaches_every_worker_merged(workers, tiny_dir):
    from agentrl.config import LoraSpec

    lora = LoraSpec(rank=4, alpha=8.0, target_modules=("q_proj", "v_proj", "o_proj"))
    assert checks.check_push(workers[1], tiny_dir, lora) <= 1e-4


def test_killed_worker_is_restarted_and_its_episodes_aborted(workers):
    checks.check_kill(workers[1])

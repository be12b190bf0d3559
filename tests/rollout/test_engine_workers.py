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
from agentrl.llm.base import turn_seed  # noqa: E402
from agentrl.rollout.collector import collect  # noqa: E402
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


@pytest.fixture(scope="module", params=["shared_memory", "broadcast"])
def workers(tiny_dir, request):
    """1 and 2 local workers on each weight transport (``auto`` = shared memory for local workers)."""
    state = checks.initial_state(tiny_dir)
    one = ProcessEngineWorkers(1, checks.spec_of(tiny_dir), state, 0, transport=request.param)
    two = ProcessEngineWorkers(2, checks.spec_of(tiny_dir), state, 0, transport=request.param)
    assert one.transport == two.transport == request.param
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


def test_auto_takes_shared_memory_for_local_workers_and_refuses_unknown_transports(tiny_dir):
    state = checks.initial_state(tiny_dir)
    with pytest.raises(ValueError, match="unknown rollout.weight_transport 'carrier_pigeon'"):
        ProcessEngineWorkers(1, checks.spec_of(tiny_dir), state, 0, transport="carrier_pigeon")
    with ProcessEngineWorkers(1, checks.spec_of(tiny_dir), state, 0) as auto:
        assert auto.transport == "shared_memory" and auto._sender is None
        assert checks.check_push(auto, tiny_dir) <= 1e-4
        with pytest.raises(ValueError, match="never go back"):
            auto.publish(state, auto.policy_version - 1)


def _listening(pids) -> dict[int, str]:
    """{socket inode: local address (hex, /proc/net/tcp{,6})} of the TCP sockets in LISTEN state
    that the processes ``pids`` hold (what ``ss -ltnp`` lists for them)."""
    import os

    mine = set()
    for pid in pids:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                mine.add(int(target[8:-1]))
    out = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.read().splitlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and int(cols[9]) in mine:
                    out[int(cols[9])] = cols[1]
    return out


def _loopback(hex_address: str) -> bool:
    host = hex_address.rsplit(":", 1)[0]
    return host.endswith("7F") if len(host) == 8 else host in ("00000000000000000000000001000000",
                                                                "0000000000000000FFFF00000100007F")


@pytest.mark.parametrize("transport", ["shared_memory", "broadcast"])
def test_a_one_host_push_to_two_workers_listens_on_loopback_only(tiny_dir, transport):
    """Issue 52: ``ss -ltnp`` of the trainer and its 2 workers while pushes run shows no socket
    on a non-loopback address (before: the weight store on ``*:PORT``); shared memory opens none."""
    import os
    import threading

    from agentrl.update.lora import inference_state_dict

    before = set(_listening([os.getpid()]))  # whatever this test process held already
    state = checks.initial_state(tiny_dir)
    seen: dict[int, str] = {}
    with ProcessEngineWorkers(2, checks.spec_of(tiny_dir), state, 0, transport=transport) as w:
        pids = [os.getpid(), *w.pids()]
        stop = threading.Event()

        def watch():
            while not stop.is_set():
                seen.update({k: v for k, v in _listening(pids).items() if k not in before})
                stop.wait(0.01)

        t = threading.Thread(target=watch)
        t.start()
        try:
            engine, _ = checks.trained_model(tiny_dir, None)
            for version in (1, 2):
                w.push_weights(inference_state_dict(engine.model), version)
        finally:
            stop.set()
            t.join()
    assert all(_loopback(a) for a in seen.values()), seen
    if transport == "shared_memory":
        assert seen == {}
    else:
        assert len(seen) >= 2  # the store and the members' gloo listeners, all on 127.0.0.1

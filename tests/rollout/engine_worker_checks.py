"""Checks shared by the local-process and the Ray engine-worker tests (tests/rollout and
tests/rollout_ray): 1 vs 2 workers → the same TurnTable; a pushed update reaches every
worker (logprob within 1e-4 of the trainer's, the new version); a killed worker is
restarted and its unfinished episodes come back aborted, never scored."""

from __future__ import annotations

import dataclasses
import os
import signal

import numpy as np
import torch

from agentrl.config import UpdateConfig
from agentrl.llm.base import SamplingParams
from agentrl.rollout.agent_loop import LoopConfig
from agentrl.rollout.collector import CollectConfig
from agentrl.rollout.engines.interface import EngineSpec, shard_groups
from agentrl.store import TurnStore
from agentrl.types import EpisodeStatus, TurnTable

#: A fixed probe: prompt ids and the completion whose logprobs every worker reports.
PROBE_PROMPT, PROBE_COMPLETION = [5, 17, 99, 3, 250, 41], [7, 300, 12, 2]


def toy_config(seed: int = 5, *, n_groups: int = 3, num_slots: int | None = None) -> CollectConfig:
    """Toy env, window context, constrained admissible actions, 2 episodes per group."""
    loop = LoopConfig(context="window", max_turns=4, action_format="whole", action_constraint="admissible")
    return CollectConfig(env_id="agentrl/Toy-v0", n_groups=n_groups, group_size=2, seed=seed, num_workers=1,
                         progress=False, loop=loop, num_slots=num_slots,
                         sampling=SamplingParams(max_tokens=8, seed=seed * 7 + 1))


def spec_of(tiny_dir) -> EngineSpec:
    return EngineSpec(model=str(tiny_dir))


def initial_state(tiny_dir) -> dict:
    from agentrl.llm.hf import HFEngine

    return dict(HFEngine.from_pretrained(tiny_dir).model.state_dict())


def _table(episodes, path) -> TurnTable:
    with TurnStore(path) as store:
        store.add_episodes(episodes, run_id="r")
        return store.table(run_id="r")


def check_same_table(one, two, tmp_path) -> int:
    """1-worker and 2-worker collects of the same config give identical TurnTables and
    tokens; returns the number of turns compared."""
    cc = toy_config()
    a, b = one.collect(cc), two.collect(cc)
    assert [e.episode_id for e in a] == [e.episode_id for e in b] == list(range(6))
    assert all(e.status == EpisodeStatus.OK for e in a + b)
    for x, y in zip(a, b):
        assert (x.group_id, x.seed, x.task_id, len(x.turns)) == (y.group_id, y.seed, y.task_id, len(y.turns))
        for s, t in zip(x.turns, y.turns):
            np.testing.assert_array_equal(s.prompt_ids, t.prompt_ids)
            np.testing.assert_array_equal(s.completion_ids, t.completion_ids)
            np.testing.assert_allclose(s.completion_logprobs, t.completion_logprobs, atol=1e-5)
            assert s.policy_version == t.policy_version == one.policy_version
    ta, tb = _table(a, tmp_path / "one.sqlite"), _table(b, tmp_path / "two.sqlite")
    for f in dataclasses.fields(TurnTable):
        x, y = getattr(ta, f.name), getattr(tb, f.name)
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y, err_msg=f.name)
        else:
            assert x == y, f.name
    # the sampler really samples: the two episodes of a group differ somewhere
    assert any([t.action for t in a[2 * g].turns] != [t.action for t in a[2 * g + 1].turns] for g in range(3))
    return len(ta)


def trained_model(tiny_dir, lora=None):
    """(trainer engine whose model took one real optimizer step — with LoRA adapters when
    ``lora`` is a ``LoraSpec`` —, logprobs of the probe before the step)."""
    from agentrl.llm.hf import HFEngine
    from agentrl.update.batch import build_batch
    from agentrl.update.lora import apply_lora
    from agentrl.update.step import make_optimizer, update

    torch.manual_seed(0)
    engine = HFEngine.from_pretrained(tiny_dir)
    before = engine.score(PROBE_PROMPT, PROBE_COMPLETION)
    model = engine.model.train() if lora is None else apply_lora(engine.model, lora).train()
    engine.model = model
    batch = build_batch([np.array(PROBE_PROMPT, np.int32)], [np.array(PROBE_COMPLETION, np.int32)],
                        [before], np.array([1.0]), pad_id=engine.pad_token_id)
    update(model, make_optimizer(model, 1e-2), batch, UpdateConfig(lr=1e-2, grad_clip=0.0, micro_batch=1))
    model.eval()
    return engine, before


def check_push(workers, tiny_dir, lora=None) -> float:
    """After an optimizer step on the trainer (full or LoRA: the merged weights are pushed)
    and a push as version v+1, every worker's probe logprobs equal the trainer's within
    1e-4 and report v+1; returns the max gap."""
    from agentrl.update.lora import inference_state_dict

    stale = workers.score(PROBE_PROMPT, PROBE_COMPLETION)
    engine, before = trained_model(tiny_dir, lora)
    after = engine.score(PROBE_PROMPT, PROBE_COMPLETION)
    assert np.max(np.abs(after - before)) > 1e-3  # the step really moved the probe
    assert all(np.max(np.abs(s.logprobs - after)) > 1e-3 for s in stale)
    version = workers.policy_version + 1
    workers.push_weights(inference_state_dict(engine.model), version)
    scores = workers.score(PROBE_PROMPT, PROBE_COMPLETION)
    assert [s.worker for s in scores] == list(range(workers.n))
    assert all(s.policy_version == version for s in scores)
    gap = max(float(np.max(np.abs(s.logprobs - after))) for s in scores)
    assert gap <= 1e-4
    eps = workers.collect(toy_config(seed=9, n_groups=2))
    assert {t.policy_version for e in eps for t in e.turns} == {version}  # each turn keeps its version
    return gap


def check_kill(workers) -> list:
    """SIGKILL worker 1 when its first episode arrives: it is restarted (same version), the
    episodes of its shard not received yet come back aborted with the reason and no turns;
    the next collect is whole again. Returns the aborted episodes."""
    cc = toy_config(seed=3, n_groups=4, num_slots=1)  # one episode at a time: the kill is mid-collect
    mine = {g * cc.group_size + j for g in shard_groups(cc.n_groups, workers.n)[1] for j in range(cc.group_size)}
    pid, version, killed = workers.pids()[1], workers.policy_version, []

    def on_episode(ep):
        if ep.episode_id in mine and not killed:
            os.kill(pid, signal.SIGKILL)
            killed.append(ep.episode_id)

    eps = workers.collect(cc, on_episode=on_episode)
    assert killed and [e.episode_id for e in eps] == list(range(8))  # none silently dropped
    aborted = [e for e in eps if e.status != EpisodeStatus.OK]
    assert aborted and {e.episode_id for e in aborted} <= mine - set(killed)
    for e in aborted:
        assert e.status == EpisodeStatus.ABORTED and "died" in e.error and e.turns == []
    table = TurnTable.from_episodes(eps)
    assert not np.isin(table.episode, [e.episode_id for e in aborted]).any()  # nothing of them is scored
    assert workers.restarts == 1 and workers.pids()[1] != pid
    again = workers.collect(toy_config(seed=4, n_groups=2))
    assert all(e.status == EpisodeStatus.OK for e in again)
    assert all(s.policy_version == version for s in workers.score(PROBE_PROMPT, PROBE_COMPLETION))
    return aborted

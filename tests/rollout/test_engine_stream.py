"""Asynchronous rollouts (``agentrl.rollout.engines.stream``), piece by piece.

- ``GroupBuffer``: hand-built groups at known policy versions → which are taken, dropped,
  carried; a property over random arrivals: nothing is lost or taken twice, nothing taken
  is older than the bound, the oldest eligible groups go first.
- ``collect`` with ``CollectHooks``: a plan admitted through ``next_plan`` plays exactly as
  it does alone (its own ids and seeds), and a held admission (drain) resumes.
- ``WorkerHooks``: ``continue`` loads newer weights before a round, ``drain`` only when no
  episode is in flight; a ``close`` in the pipe stops the collect.
- ``SharedWeights``: a publish that overlaps a load makes the worker load again (seqlock).
- ``EngineStream`` over real worker processes: productions run ahead by at most S, a
  killed worker's episodes come back aborted (flagged, never dropped silently).
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine_worker_checks as checks  # noqa: E402

from agentrl.rollout.engines.stream import GroupBuffer, StreamClosed, WorkerHooks, group_version  # noqa: E402
from agentrl.types import Episode, EpisodeStatus, Turn  # noqa: E402


def _episode(eid: int, gid: int, versions: list[int]) -> Episode:
    ep = Episode(episode_id=eid, group_id=gid, env_id="toy", task_id="t", seed=0)
    ep.turns = [Turn(turn_id=eid * 10 + k, episode_id=eid, group_id=gid, t=k, run_id="", observation="o", anchor_obs="o",
                     action="a", action_valid=True, reward=0.0, prompt_ids=np.zeros(1, np.int64),
                     completion_ids=np.zeros(1, np.int64), completion_logprobs=np.zeros(1, np.float32),
                     policy_version=v) for k, v in enumerate(versions)]
    return ep


def test_group_buffer_takes_the_oldest_eligible_groups_and_drops_the_stale():
    buf = GroupBuffer(group_size=2)
    buf.expect([0, 1, 2, 3])
    versions = {0: ([3, 4], [4]), 1: ([1, 2], [2, 2]), 2: ([4], [4, 5]), 3: ([5], [])}  # group 3: member 1 missing
    for g, members in versions.items():
        for j, vs in enumerate(members):
            if g != 3 or j == 0:
                buf.add(_episode(2 * g + j, g, vs))
    assert group_version(buf._groups[1]) == 1
    assert buf.take(4) is None and buf.pending == 4  # only 3 complete: nothing taken, nothing lost
    dropped = buf.drop_stale(min_version=5 - 2)  # trainer at version 5, S = 2: oldest turn must be >= 3
    assert [[e.episode_id for e in g] for g in dropped] == [[2, 3]]
    taken = buf.take(2)
    assert [[e.episode_id for e in g] for g in taken] == [[0, 1], [4, 5]]
    assert buf.pending == 1 and buf.in_flight == 1  # group 3 carries over
    with pytest.raises(KeyError):
        buf.add(_episode(99, 7, [1]))  # a group nobody expected


@settings(max_examples=60, deadline=None, database=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.lists(st.integers(0, 9), max_size=3)), min_size=1, max_size=12),
       st.integers(1, 3), st.integers(0, 3), st.integers(5, 9))
def test_group_buffer_never_loses_a_group_or_takes_a_stale_one(groups, n, s, version):
    buf, size = GroupBuffer(group_size=2), 2
    buf.expect(range(len(groups)))
    eid = 0
    for g, (lag, vs) in enumerate(groups):
        for _ in range(size):
            buf.add(_episode(eid, g, [max(0, version - lag)] + vs if vs else [version - lag]))
            eid += 1
    dropped = buf.drop_stale(version - s)
    taken = []
    while (got := buf.take(n)) is not None:
        taken += got
    ids = sorted(e.group_id for grp in dropped + taken for e in grp[:1])
    assert len(ids) == len(set(ids))  # nothing twice
    assert len(ids) + buf.pending == len(groups)  # nothing lost
    assert all(group_version(g) >= version - s for g in taken)
    assert all(group_version(g) < version - s for g in dropped)
    assert [g[0].group_id for g in taken] == sorted(g[0].group_id for g in taken)  # oldest first


class _Hooks:
    """Test hooks: one extra plan, admission held for ``hold`` calls while episodes play."""

    def __init__(self, plan, hold: int = 0):
        self.plans, self.hold, self.calls = [plan], hold, []

    def next_plan(self):
        return self.plans.pop() if self.plans else None

    def may_admit(self, n_active):
        self.calls.append(n_active)
        if self.hold and n_active > 0:
            self.hold -= 1
            return False
        return True

    def before_round(self):
        pass


@pytest.mark.parametrize("hold", [0, 3])
def test_a_hooked_plan_plays_as_it_does_alone(tiny_engine, tiny_tokenizer, hold):
    from agentrl.llm.chat import ChatRenderer
    from agentrl.rollout.collector import collect

    renderer = ChatRenderer(tiny_tokenizer)
    a = replace(checks.toy_config(seed=5, n_groups=2), turn_seeds=True)
    b = replace(checks.toy_config(seed=8, n_groups=2), turn_seeds=True, id_offset=100, group_offset=10)
    alone = collect(tiny_engine, renderer, b)
    hooks, seen = _Hooks(b, hold=hold), []
    first = collect(tiny_engine, renderer, a, hooks=hooks, on_episode=seen.append)
    assert [e.episode_id for e in first] == [0, 1, 2, 3]  # the hooked plan is reported, not returned
    both = sorted(seen, key=lambda e: e.episode_id)
    assert [e.episode_id for e in both] == [0, 1, 2, 3, 100, 101, 102, 103]
    assert [e.group_id for e in both[4:]] == [10, 10, 11, 11]
    for x, y in zip(alone, both[4:]):
        assert (x.seed, x.episode_id) == (y.seed, y.episode_id)
        assert [t.completion_ids.tolist() for t in x.turns] == [t.completion_ids.tolist() for t in y.turns]
    if hold:
        assert 0 in hooks.calls  # admission resumed once nothing was in flight
    with pytest.raises(ValueError, match="cannot play on the pool"):
        collect(tiny_engine, renderer, a, hooks=_Hooks(replace(b, env_kwargs={"size": 3})))


class _Conn:
    def __init__(self, msgs):
        self.msgs = list(msgs)

    def poll(self):
        return bool(self.msgs)

    def recv(self):
        return self.msgs.pop(0)


class _Engine:
    def __init__(self):
        self.policy_version, self.loads = 0, []

    def update_weights(self, state, version):
        self.loads.append(version)
        self.policy_version = version


class _Shared:
    def __init__(self, version):
        self.version, self.tensors = version, {}

    def load_into(self, engine):
        engine.update_weights(self.tensors, self.version)
        return self.version


def test_worker_hooks_continue_loads_before_a_round_drain_only_when_empty():
    eng, shared = _Engine(), _Shared(3)
    cont = WorkerHooks(_Conn([("stream", ("plan-b", "continue"))]), shared, eng, "continue")
    assert cont.may_admit(4)
    cont.before_round()
    assert eng.loads == [3] and cont.next_plan() == "plan-b" and cont.next_plan() is None
    eng, shared = _Engine(), _Shared(2)
    drain = WorkerHooks(_Conn([]), shared, eng, "drain")
    drain.before_round()
    assert eng.loads == [] and not drain.may_admit(1)  # episodes in flight finish on version 0
    assert drain.may_admit(0) and eng.loads == [2]  # drained: load, admit
    closing = WorkerHooks(_Conn([("close", None)]), shared, eng, "continue")
    with pytest.raises(StreamClosed):
        closing.before_round()
    with pytest.raises(ValueError, match="on_weight_update"):
        WorkerHooks(_Conn([]), shared, eng, "pause")


def test_a_publish_during_a_load_makes_the_worker_load_again():
    torch = pytest.importorskip("torch")
    from agentrl.llm.weight_sync import SharedWeights

    shared = SharedWeights({"w": torch.zeros(3)}, version=1)

    class Racing:
        policy_version, seen = 0, []

        def update_weights(self, state, version):
            self.seen.append((version, state["w"].clone()))
            if len(self.seen) == 1:  # the trainer publishes while this load runs
                shared.publish({"w": torch.full((3,), 7.0)}, 2)

    eng = Racing()
    assert shared.load_into(eng) == 2
    assert [v for v, _ in eng.seen] == [1, 2] and torch.equal(eng.seen[-1][1], torch.full((3,), 7.0))
    assert shared.version == 2


@pytest.fixture(scope="module", params=["shared_memory", "broadcast"])
def stream_workers(tiny_dir, request):
    pytest.importorskip("torch")
    from agentrl.rollout.engines.procs import ProcessEngineWorkers

    return lambda n: ProcessEngineWorkers(n, checks.spec_of(tiny_dir), checks.initial_state(tiny_dir), 0,
                                          transport=request.param)


def _plan(k):
    base = checks.toy_config(seed=11 + k, n_groups=2, num_slots=1)  # one episode at a time: shards take a while
    return replace(base, id_offset=k * 4, group_offset=k * 2)


def test_stream_runs_ahead_by_at_most_s_and_survives_a_killed_worker(stream_workers, tiny_dir):
    from agentrl.rollout.engines.stream import EngineStream

    state = checks.initial_state(tiny_dir)
    stream = EngineStream(stream_workers(2), _plan, start=0, max_staleness=1, n_groups=2)
    seen: list[int] = []

    def take(version):
        if version:
            stream.push_weights(state, version)  # the trainer's update → version (same values, new label)
        got = stream.take(version=version)
        groups = sorted({e.group_id for e in got.episodes})
        assert len(groups) == 2 and not set(groups) & set(seen) and len(got.episodes) == 4
        assert all(0 <= s <= 1 for s in got.staleness) and 0 <= got.engine_idle_frac <= 1 and got.wait_s >= 0
        assert all(version - t.policy_version <= 1 for e in got.episodes for t in e.turns)
        seen.extend(groups)
        return got

    try:
        assert stream._next == 2  # productions 0 and 1 (S = 1 ahead) submitted, no more
        take(0)
        assert stream._next == 2
        take(1)
        assert stream._next == 3
        os.kill(stream.workers._procs[1].pid, signal.SIGKILL)  # busy with production 2 (or idle)
        later = take(2).episodes + take(3).episodes
        aborted = [e for e in later if e.status != EpisodeStatus.OK]
        assert all(e.status == EpisodeStatus.ABORTED and "died" in e.error and not e.turns for e in aborted)
        assert all(e.group_id % 2 == 1 for e in aborted)  # worker 1 plays the second group of each production
        for _ in range(3):  # the restarted worker plays on
            take(stream.policy_version + 1)
        assert stream.restarts == 1
    finally:
        stream.close()

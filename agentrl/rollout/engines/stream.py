"""Asynchronous rollouts: engine workers that keep sampling while the trainer updates.

``rollout.max_staleness: S ≥ 1`` (with ``rollout.engines: K`` local engine workers) replaces
the synchronous collect of each iteration by an ``EngineStream``:

- **Production.** Production ``k`` is iteration ``k``'s plan (``collect_config``: its tasks
  and seeds, ids offset as the synchronous loop numbers them), split over the workers in
  whole groups (``shard_groups``). Before taking iteration ``c`` the stream has submitted
  productions up to ``c + S`` (one more whenever dropped groups leave too few in flight), so
  the workers run at most S iterations ahead of the trainer.
- **Workers never wait for an iteration.** Each worker is sent up to two shards; the second
  joins the first's ``collect`` as its slots free up (``CollectHooks.next_plan``), so a long
  episode does not hold the others (continuous admission at the episode level).
- **Weights.** The trainer ``publish``es each new version into the shared buffer and goes
  on; a worker loads it on its own (``WorkerHooks``), under ``rollout.on_weight_update``:
  ``continue`` — before its next generation round, so episodes in flight continue under the
  new weights (every turn records the version that sampled it); ``drain`` — admission stops,
  the episodes in flight finish on the weights they started with, then the worker loads.
- **Take.** ``take(version)`` waits for ``groups_per_iteration`` complete groups, oldest
  first; a group is eligible only if every turn was sampled within S versions of the
  trainer's ``version``; older complete groups are dropped and counted, never trained.
  Groups still playing carry over to a later iteration (``StreamBatch.carried``).

Sources: bounded staleness as in AReaL (arXiv 2505.24298, ``max_head_offpolicyness``) and
SkyRL/prime-rl/NeMo-RL (``max_staleness_steps`` and kin). No torch here.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from agentrl.rollout.collector import CollectConfig
from agentrl.rollout.engines.interface import EngineWorkerError, aborted_episodes, shard_config, shard_groups
from agentrl.rollout.engines.stream_buffer import GroupBuffer, StreamBatch, group_version
from agentrl.rollout.engines.stream_worker import WEIGHT_UPDATE_MODES, StreamClosed, WorkerHooks
from agentrl.types import Episode

__all__ = ["EngineStream", "GroupBuffer", "StreamBatch", "StreamClosed", "WorkerHooks", "WEIGHT_UPDATE_MODES",
           "group_version"]


@dataclass
class _Shard:
    cc: CollectConfig
    waiting: set[int] = field(default_factory=set)  # episode ids not yet received


class EngineStream:
    """Asynchronous rollouts over ``ProcessEngineWorkers`` (see the module docstring).

    Args:
        workers: open local engine workers (the stream owns their pipes until ``close``).
        plan: production index k → its ``CollectConfig`` (ids offset, per-turn seeds are set here).
        start: the first production (the iteration the run starts or resumes at).
        max_staleness: S ≥ 1. n_groups: groups per take (``rollout.groups_per_iteration``).
        mode: ``rollout.on_weight_update``.
        poll_s: seconds the dispatcher thread waits on the pipes per turn of its loop.
    Raises:
        ValueError: S < 1 or an unknown mode.
    """

    def __init__(self, workers, plan: Callable[[int], CollectConfig], *, start: int, max_staleness: int,
                 n_groups: int, mode: str = "continue", poll_s: float = 0.05) -> None:
        if max_staleness < 1 or mode not in WEIGHT_UPDATE_MODES:
            raise ValueError(f"EngineStream needs max_staleness >= 1 and mode in {WEIGHT_UPDATE_MODES}, "
                             f"got {max_staleness}, {mode!r}")
        self.workers, self._plan, self.max_staleness, self.n_groups, self.mode = workers, plan, max_staleness, n_groups, mode
        self._next, self._taken, self.poll_s = start, start, poll_s
        self._buffer: GroupBuffer | None = None
        self._todo = [deque() for _ in range(workers.n)]
        self._out: list[list[_Shard]] = [[] for _ in range(workers.n)]
        self._busy_s, self._busy_since = [0.0] * workers.n, [None] * workers.n
        self._last_take, self._error, self._stop = time.monotonic(), None, False
        self._probes: list[tuple[int, int, object]] = []
        self._cv = threading.Condition()
        with self._cv:
            self._fill()
        self._thread = threading.Thread(target=self._serve, name="agentrl-engine-stream", daemon=True)
        self._thread.start()

    @property
    def n(self) -> int:
        return self.workers.n

    @property
    def restarts(self) -> int:
        return self.workers.restarts

    @property
    def policy_version(self) -> int:
        return self.workers.policy_version

    def _submit(self) -> None:
        """Queue production ``self._next`` (caller holds the condition)."""
        cc = self._plan(self._next)
        if self._buffer is None:
            self._buffer = GroupBuffer(cc.group_size)
        for i, groups in enumerate(shard_groups(cc.n_groups, self.workers.n)):
            if groups:
                self._todo[i].append(shard_config(cc, groups))
                self._buffer.expect(cc.group_offset + g for g in groups)
        self._next += 1

    def _fill(self) -> None:
        """Submit productions up to the one S ahead of the iteration being taken (caller holds the condition)."""
        while self._next <= self._taken + self.max_staleness:
            self._submit()

    def push_weights(self, state, version: int) -> None:
        """Publish ``state`` as ``version``; the workers load it on their own (returns at once)."""
        self.workers.publish(state, version)

    def set_probe(self, prompt_ids, completion_ids) -> None:
        """Have every worker score these tokens after each weight load (``probe_reports``);
        call it before the first ``take`` (the workers are idle then)."""
        self.workers.set_probe(prompt_ids, completion_ids)

    def probe_reports(self) -> list[tuple[int, int, object]]:
        """``(worker, version, float32[C] logprobs)`` of every load since the last call."""
        with self._cv:
            out, self._probes = self._probes, []
        return out

    def take(self, version: int) -> StreamBatch:
        """The next iteration's groups for a trainer at policy ``version`` (see the module docstring).

        Raises:
            EngineWorkerError: a worker raised (its traceback), or the stream is closed.
        """
        t0 = time.monotonic()
        dropped: list[list[Episode]] = []
        with self._cv:
            self._fill()
            self._cv.notify_all()
            extra = 0
            while True:
                if self._error is not None or self._stop:
                    raise EngineWorkerError(self._error or "the engine stream is closed")
                dropped += self._buffer.drop_stale(version - self.max_staleness)
                groups = self._buffer.take(self.n_groups)
                if groups is not None:
                    break
                if self._buffer.pending < self.n_groups:  # drops left too few in flight: one more production
                    extra += 1
                    if extra > self.max_staleness + 2:
                        raise EngineWorkerError(
                            f"{extra - 1} productions in a row were too stale for policy version {version} "
                            f"(rollout.max_staleness={self.max_staleness}); the workers hold version "
                            f"{self.workers.policy_version}: push the trainer's weights (push_weights) every update")
                    self._submit()
                    self._cv.notify_all()
                self._cv.wait(1.0)
            self._taken += 1
            now = time.monotonic()
            busy = sum(self._busy_s) + sum(now - s for s in self._busy_since if s is not None)
            self._busy_s = [0.0] * self.n
            self._busy_since = [now if s is not None else None for s in self._busy_since]
            span, self._last_take = now - self._last_take, now
            carried = self._buffer.in_flight
        episodes = sorted((e for g in groups for e in g), key=lambda e: e.episode_id)
        staleness = [version - v if (v := group_version(g)) is not None else 0 for g in groups]
        mixed = sum(len({t.policy_version for t in e.turns}) > 1 for e in episodes)
        return StreamBatch(episodes, staleness, len(dropped), sum(len(g) for g in dropped), carried,
                           time.monotonic() - t0, max(0.0, 1.0 - busy / max(span * self.n, 1e-9)), mixed)

    # ------------------------------------------------------------ dispatcher thread
    def _serve(self) -> None:
        last: dict[int, float] = {}
        try:
            while not self._stop:
                self._dispatch(last)
                busy = {i: last[i] for i in range(self.n) if self._out[i]}
                if not busy:
                    with self._cv:
                        self._cv.wait(self.poll_s)
                    continue
                for i, msg in self.workers.next_messages(busy, max_wait_s=self.poll_s):
                    last[i] = time.monotonic()
                    self._receive(i, msg)
        except BaseException as exc:  # surfaced by take()
            with self._cv:
                self._error = self._error or f"engine stream failed: {exc!r}"
                self._cv.notify_all()

    def _dispatch(self, last: dict[int, float]) -> None:
        """Send each worker queued shards until it holds two (one playing, one to join it)."""
        sends = []
        with self._cv:
            for i in range(self.n):
                while len(self._out[i]) < 2 and self._todo[i]:
                    scc = self._todo[i].popleft()
                    self._out[i].append(_Shard(scc, waiting=set(self._ids_of(scc))))
                    sends.append((i, scc))
                    if self._busy_since[i] is None:
                        self._busy_since[i] = time.monotonic()
        for i, scc in sends:
            self.workers.send(i, ("stream", (scc, self.mode)))
            last[i] = time.monotonic()

    @staticmethod
    def _ids_of(scc: CollectConfig) -> frozenset[int]:
        return frozenset(scc.id_offset + g * scc.group_size + j for g in scc.groups for j in range(scc.group_size))

    def _receive(self, i: int, msg) -> None:
        with self._cv:
            if msg is None:  # died or silent: restarted with the current weights; its shards come back aborted
                reason = (f"engine worker {i} died or went silent while streaming; it was restarted with "
                          f"policy version {self.workers.policy_version}")
                for shard in self._out[i]:
                    for ep in aborted_episodes(shard.cc, self._ids_of(shard.cc) - shard.waiting, reason):
                        self._buffer.add(ep)
                self._out[i] = []
            elif msg[0] == "episode":
                ep = msg[1]
                for shard in self._out[i]:
                    if ep.episode_id in shard.waiting:
                        shard.waiting.discard(ep.episode_id)
                        self._buffer.add(ep)
                self._out[i] = [s for s in self._out[i] if s.waiting]
            elif msg[0] == "probe":  # the worker loaded a version and scored the sync probe
                self._probes.append((i, int(msg[1][0]), msg[1][1]))
            elif msg[0] == "error":
                self._error = f"engine worker {i} raised:\n{msg[1]}"
            if not self._out[i] and self._busy_since[i] is not None:
                self._busy_s[i] += time.monotonic() - self._busy_since[i]
                self._busy_since[i] = None
            self._cv.notify_all()

    def close(self) -> None:
        """Stop the dispatcher thread and the workers (idempotent)."""
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self._thread.is_alive():
            self._thread.join(10.0)
        self.workers.close()

"""``ProcessEngineWorkers``: rollout engine workers as local processes (``rollout.backend: local``).

Each worker is a ``torch.multiprocessing`` "spawn" process (non-daemonic: it starts its own
env worker processes) with one duplex ``Pipe`` — the standard library's, pickled with
torch's reductions — and an ``EngineWorker`` body, on its own device when
``rollout.engine_devices`` gives one (``CUDA_VISIBLE_DEVICES`` set in the child before CUDA
starts; ``place_workers``).

Weights travel by ``transport`` (``rollout.weight_transport``; ``agentrl.rollout.engines.proc_child``):
``shared_memory`` (the default for these local workers: ``SharedWeights`` buffers every worker
maps, written in place by each publish, no socket) or ``broadcast`` (a separate torch.distributed
group of the trainer and the K workers, ``agentrl.llm.weight_broadcast`` — gloo on CPU, NCCL when
trainer and engines are all on CUDA — bound to loopback, keyed and signed with the run's secret).
Start: each worker loads the folder's model, says ``joining``, opens its weights (joins the
group and receives the trainer's current weights, or maps the buffers) and says ``ready``. A
push publishes the new version, then each worker is told the version, loads it and
acknowledges; asynchronous rollouts skip the message and load on their own
(``stream_worker.WorkerHooks``).

Collect: each worker gets its shard config (``shard_config``), streams every finished
episode back at once (``("episode", ep)``) and ends with ``("done", n)``. The parent waits on
the pipes and the process sentinels together: a worker that exits (killed, OOM, segfault)
or sends nothing for ``answer_timeout_s`` is killed and restarted with the current weights
and version (the weight group re-forms with it and the last push is sent again; shared memory
already holds it), and the
episodes of its shard not yet received come back ``aborted``.
"""

from __future__ import annotations

import threading
import time
import weakref
from multiprocessing.connection import wait
from typing import Callable, Mapping, Sequence

from agentrl.rollout.collector import CollectConfig
from agentrl.rollout.engines.interface import (EngineSpec, EngineWorkerError, WorkerScore, aborted_episodes,
                                               place_workers, shard_config, shard_groups)
from agentrl.rollout.engines.proc_child import TRANSPORTS, serve, stop
from agentrl.types import Episode

#: Seconds a failed broadcast waits for a killed worker to show as dead (its sockets close first).
DEATH_GRACE_S = 2.0


class ProcessEngineWorkers:
    """``n`` engine worker processes (the ``EngineWorkers`` interface).

    Args:
        n: workers (≥ 1).
        spec: how each worker builds its engine.
        state: the trainer's inference weights (``{name: tensor}``), broadcast to the workers at start.
        version: their policy version.
        devices: one device per worker (``rollout.engine_devices``, ``place_workers``); None:
            every worker on ``spec.device``.
        start_timeout_s: seconds a worker may take to start (imports, model load, joining the group).
        answer_timeout_s: seconds a worker may go without sending anything while it has work.
        transport: ``auto`` (= ``shared_memory``) | ``shared_memory`` | ``broadcast``
            (``rollout.weight_transport``; see the module docstring).
    Raises:
        EngineWorkerError: a worker failed to start (its traceback) or not in time.
        ValueError: an unknown ``transport``.
    """

    def __init__(self, n: int, spec: EngineSpec, state: Mapping, version: int, *,
                 devices: Sequence[str] | None = None, start_timeout_s: float = 600.0,
                 answer_timeout_s: float = 1800.0, transport: str = "auto") -> None:
        from agentrl.llm.weight_sync import SharedWeights, spawn_context

        self.transport = "shared_memory" if transport == "auto" else transport
        if self.transport not in TRANSPORTS:
            raise ValueError(f"unknown rollout.weight_transport {transport!r} for local engine workers; choose "
                             f"auto, {' or '.join(TRANSPORTS)}")
        self.n, self.spec, self.restarts, self.policy_version = n, spec, 0, int(version)
        self.specs = place_workers(spec, devices, n)
        self.start_timeout_s, self.answer_timeout_s = start_timeout_s, answer_timeout_s
        self._ctx = spawn_context()
        self._sender = self._shared = None
        if self.transport == "broadcast":
            from agentrl.llm.weight_broadcast import WeightLayout, WeightSender

            cuda = all(s.device.startswith("cuda") for s in self.specs) and all(
                getattr(t, "is_cuda", False) for t in state.values())
            self._sender = WeightSender(WeightLayout.of(state, int(spec.weight_bucket_mb * (1 << 20))), n,
                                        device="cuda" if cuda else "cpu", timeout_s=start_timeout_s)
        else:
            self._shared = SharedWeights(state, self.policy_version)
        self._procs: list = [None] * n
        self._conns: list = [None] * n
        self._pids: list[int | None] = [None] * n
        self._closed = False
        self._lock, self._restarted, self.probe = threading.RLock(), set(), None  # restarted by publish, not yet reported
        self._finalizer = weakref.finalize(self, stop, self._procs, self._conns, self._sender)
        source = self._shared if self._sender is None else self._sender.open()
        for i in range(n):
            self._start(i, source)
        for i in range(n):
            self._expect(i, "joining")
        if self._sender is not None:
            self._form()
            self._sender.push(state, self.policy_version)
        for i in range(n):
            self._ready(i)

    # ---------------------------------------------------------------- lifecycle
    def _start(self, i: int, source) -> None:
        """Spawn worker ``i`` on ``source`` (the shared buffers, or the group's address)."""
        parent, child = self._ctx.Pipe(duplex=True)
        layout = None if self._sender is None else self._sender.layout
        proc = self._ctx.Process(target=serve, args=(child, self.specs[i], source, i + 1, layout, self.start_timeout_s),
                                 daemon=False, name=f"agentrl-engine-{i}")
        proc.start()
        child.close()
        self._procs[i], self._conns[i], self._pids[i] = proc, parent, None

    def _expect(self, i: int, kind: str) -> object:
        """The payload of worker ``i``'s next message, which must be ``kind`` (start-up)."""
        conn = self._conns[i]
        try:
            msg = conn.recv() if conn.poll(self.start_timeout_s) else ("timeout", f"no answer in {self.start_timeout_s}s")
        except (EOFError, OSError):
            self._procs[i].join(1.0)
            msg = ("died", f"exit code {self._procs[i].exitcode}")
        if msg[0] != kind:
            self.close()
            raise EngineWorkerError(f"engine worker {i} failed to start ({msg[0]}): {msg[1]}")
        return msg[1]

    def _form(self) -> None:
        try:
            self._sender.form()
        except Exception as exc:
            self.close()
            raise EngineWorkerError(f"the engine workers did not join the weight group: {exc}") from None

    def _ready(self, i: int) -> None:
        """Wait for worker ``i``'s ("ready", pid) once after each start."""
        if self._pids[i] is None:
            self._pids[i] = self._expect(i, "ready")

    def _restart(self, i: int, seen=None) -> None:
        """Kill worker ``i`` and start a fresh one with the current weights: the weight group
        re-forms with it (the live workers rejoin on their own) and the last push is sent again;
        shared memory holds them already.
        ``seen``: the process found dead; nothing happens when it was replaced meanwhile."""
        with self._lock:
            proc = self._procs[i]
            if seen is not None and proc is not seen:
                return
            if proc.is_alive():
                proc.kill()
            proc.join(5.0)
            self._conns[i].close()
            if self._sender is None:
                self._start(i, self._shared)
                self._expect(i, "joining")
            else:
                self._start(i, self._sender.regroup())
                self._expect(i, "joining")
                self._form()
                self._sender.resend()
            self.restarts += 1
            if self.probe is not None:  # its "probe_ok" goes to the stream, which ignores it
                self._ready(i)
                self._conns[i].send(("probe", self.probe))

    def pids(self) -> list[int]:
        for i in range(self.n):
            self._ready(i)
        return list(self._pids)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._finalizer()

    def __enter__(self) -> "ProcessEngineWorkers":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---------------------------------------------------------------- messages
    def send(self, i: int, msg: tuple) -> None:
        """Send ``msg`` to worker ``i`` (waits for it to be ready after a (re)start); a worker
        found dead is restarted with the current weights first."""
        self._ready(i)
        try:
            self._conns[i].send(msg)
        except (BrokenPipeError, ConnectionResetError, OSError):
            self._restart(i)
            self._ready(i)
            self._conns[i].send(msg)

    def next_messages(self, busy: dict[int, float], max_wait_s: float | None = None) -> list[tuple[int, tuple | None]]:
        """Messages from the workers in ``busy`` ({worker: time of its last message}), waiting
        at most ``max_wait_s`` seconds (None: until one arrives or a worker times out):
        ``(i, msg)``, or ``(i, None)`` when worker ``i`` died or timed out (it is restarted), or
        was restarted by a failed ``publish`` since."""
        with self._lock:
            gone = [(i, None) for i in busy if i in self._restarted]
            self._restarted -= {i for i, _ in gone}
            procs = dict(enumerate(self._procs))
        if gone:
            return gone
        deadline = min(busy.values()) + self.answer_timeout_s
        handles = {self._conns[i]: i for i in busy} | {procs[i].sentinel: i for i in busy}
        timeout = max(0.0, deadline - time.monotonic())
        ready = wait(list(handles), timeout=timeout if max_wait_s is None else min(timeout, max_wait_s))
        out, seen = [], set()
        for h in ready:
            i = handles[h]
            if i in seen:
                continue
            seen.add(i)
            try:
                out.append((i, self._conns[i].recv()) if self._conns[i].poll() else (i, None))
            except (EOFError, OSError):
                out.append((i, None))
        now = time.monotonic()
        out += [(i, None) for i in busy if i not in seen and now >= busy[i] + self.answer_timeout_s]
        for i, msg in out:
            if msg is None:
                self._restart(i, seen=procs[i])
        return out

    def _ask_all(self, msg: tuple, kind: str) -> dict[int, object]:
        """Send ``msg`` to every worker; {worker: payload of its ``kind`` answer}, a worker
        that died meanwhile is restarted and left out."""
        busy = {}
        for i in range(self.n):
            self._ready(i)
            self._conns[i].send(msg)
            busy[i] = time.monotonic()
        answers = {}
        while busy:
            for i, got in self.next_messages(busy):
                busy.pop(i, None)
                if got is not None and got[0] == "error":
                    raise EngineWorkerError(f"engine worker {i} raised:\n{got[1]}")
                if got is not None:
                    answers[i] = got[1]
        return answers

    # ---------------------------------------------------------------- EngineWorkers
    def push_weights(self, state: Mapping, version: int) -> None:
        """Broadcast ``state`` as ``version`` (``publish``), then every worker loads it and
        acknowledges; returns once all have."""
        self.publish(state, version)
        self._ask_all(("weights", self.policy_version), "weights_ok")

    def publish(self, state: Mapping, version: int) -> None:
        """Broadcast ``state`` as ``version`` and return: the workers' receivers stage it and
        the workers load it on their own (asynchronous rollouts, ``agentrl.rollout.engines.stream``).
        A worker that died breaks the broadcast: the dead workers are restarted (the group
        re-forms and gets this push; ``next_messages`` reports them to a waiting caller).

        Raises:
            EngineWorkerError: the broadcast failed with every worker alive.
            ValueError: ``version`` is lower than the one published before.
        """
        if self._sender is None:
            self._shared.publish(state, version)
            self.policy_version = int(version)
            return
        self.policy_version = int(version)
        try:
            self._sender.push(state, version)
        except Exception as exc:
            # a killed worker's sockets close before its exit can be waited for: give the dead one a
            # moment to show as dead, so the broadcast is not blamed on live workers (a test's race)
            deadline = time.monotonic() + DEATH_GRACE_S
            while all(p.is_alive() for p in self._procs) and time.monotonic() < deadline:
                time.sleep(0.05)
            with self._lock:  # (a restart by the dispatcher thread meanwhile re-formed the group already)
                for i in [i for i in range(self.n) if not self._procs[i].is_alive()]:
                    self._restart(i, seen=self._procs[i])
                    self._restarted.add(i)
                if self._sender.broken:
                    raise EngineWorkerError(f"the weight broadcast of version {version} failed: {exc}") from None

    def set_probe(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> None:
        """Have every worker score these tokens after each weight load of an asynchronous
        stream and report ``("probe", (version, float32[C] logprobs))`` (``SyncCheck``)."""
        self.probe = ([int(x) for x in prompt_ids], [int(x) for x in completion_ids])
        self._ask_all(("probe", self.probe), "probe_ok")

    def worker_env(self) -> list[tuple[str | None, str]]:
        """Each worker's (``CUDA_VISIBLE_DEVICES`` inside its process, its engine's device)."""
        return [v for _, v in sorted(self._ask_all(("env", None), "env").items())]

    def score(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> list[WorkerScore]:
        msg = ("score", ([int(x) for x in prompt_ids], [int(x) for x in completion_ids]))
        answers = self._ask_all(msg, "score")
        for i in set(range(self.n)) - set(answers):  # died while scoring: ask the restarted one
            self._ready(i)
            self._conns[i].send(msg)
            answers[i] = self._conns[i].recv()[1]
        return [WorkerScore(i, *answers[i]) for i in range(self.n)]

    def collect(self, cc: CollectConfig, on_episode: Callable[[Episode], None] | None = None) -> list[Episode]:
        shards = {i: shard_config(cc, g) for i, g in enumerate(shard_groups(cc.n_groups, self.n)) if g}
        got: dict[int, list[Episode]] = {i: [] for i in shards}
        busy, errors = {}, []
        for i, scc in shards.items():
            self._ready(i)
            self._conns[i].send(("collect", scc))
            busy[i] = time.monotonic()
        while busy:
            for i, msg in self.next_messages(busy):
                if msg is None or msg[0] in ("done", "error"):
                    del busy[i]
                    if msg is None:
                        reason = (f"engine worker {i} died or went silent during collect; it was restarted with "
                                  f"policy version {self.policy_version}")
                        got[i] += aborted_episodes(shards[i], {e.episode_id for e in got[i]}, reason)
                    elif msg[0] == "error":
                        errors.append(f"engine worker {i} raised:\n{msg[1]}")
                    continue
                busy[i] = time.monotonic()
                got[i].append(msg[1])
                if on_episode is not None:
                    on_episode(msg[1])
        if errors:
            raise EngineWorkerError("\n".join(errors))
        return sorted((e for eps in got.values() for e in eps), key=lambda e: e.episode_id)

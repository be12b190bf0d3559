"""``ProcessEngineWorkers``: rollout engine workers as local processes (``rollout.backend: local``).

Each worker is a ``torch.multiprocessing`` "spawn" process (non-daemonic: it starts its own
env worker processes) with one duplex ``Pipe`` — the standard library's, pickled with
torch's reductions — and an ``EngineWorker`` body. The weights live once in a
``SharedWeights`` buffer (``agentrl.llm.weight_sync``: shared memory on CPU, CUDA IPC on
GPU) handed to every process at start; a push writes the buffer in place and sends each
worker the version, which it loads and acknowledges.

Collect: each worker gets its shard config (``shard_config``), streams every finished
episode back at once (``("episode", ep)``) and ends with ``("done", n)``. The parent waits on
the pipes and the process sentinels together: a worker that exits (killed, OOM, segfault)
or sends nothing for ``answer_timeout_s`` is killed and restarted with the current weights
and version, and the episodes of its shard not yet received come back ``aborted``.
"""

from __future__ import annotations

import os
import time
import traceback
import weakref
from multiprocessing.connection import wait
from typing import Callable, Mapping, Sequence

from agentrl.rollout.collector import CollectConfig
from agentrl.rollout.engines.interface import EngineSpec, EngineWorkerError, WorkerScore, aborted_episodes, shard_config, shard_groups
from agentrl.rollout.engines.worker import EngineWorker
from agentrl.types import Episode


def _serve(conn, spec: EngineSpec, shared, version: int) -> None:
    """Worker process loop: build the engine, load the shared weights, then serve
    ("collect", cc) | ("stream", (cc, mode)) | ("weights", version) | ("score", (prompt,
    completion)) until "close"/EOF. ``version`` is the shared buffer's (kept for the log)."""
    try:
        worker = EngineWorker(spec, None, version)
        shared.load_into(worker.engine)
    except BaseException:
        conn.send(("init_error", traceback.format_exc()))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            cmd, arg = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            break
        if cmd == "close":
            break
        try:
            if cmd == "collect":
                eps = worker.collect(arg, on_episode=lambda ep: conn.send(("episode", ep)))
                conn.send(("done", len(eps)))
            elif cmd == "stream":  # asynchronous rollouts: more plans may arrive while this one plays
                from agentrl.rollout.engines.stream_worker import StreamClosed, WorkerHooks

                hooks = WorkerHooks(conn, shared, worker.engine, mode=arg[1])
                hooks.pull()
                try:
                    eps = worker.collect(arg[0], on_episode=lambda ep: conn.send(("episode", ep)), hooks=hooks)
                except StreamClosed:
                    break
                conn.send(("done", len(eps)))
            elif cmd == "weights":
                conn.send(("weights_ok", shared.load_into(worker.engine)))
            elif cmd == "score":
                conn.send(("score", worker.score(*arg)))
        except (BrokenPipeError, EOFError):
            break
        except Exception:
            conn.send(("error", traceback.format_exc()))
    worker.close()


def _stop(procs: list, conns: list) -> None:
    """Ask every worker to close, kill what is alive after 5 s."""
    for c in conns:
        try:
            if c is not None:
                c.send(("close", None))
        except (BrokenPipeError, OSError):
            pass
    deadline = time.monotonic() + 5.0
    for i, p in enumerate(procs):
        if p is not None:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(2.0)
        if conns[i] is not None:
            conns[i].close()
        procs[i] = conns[i] = None


class ProcessEngineWorkers:
    """``n`` engine worker processes (the ``EngineWorkers`` interface).

    Args:
        n: workers (≥ 1).
        spec: how each worker builds its engine.
        state: the trainer's inference weights (``{name: tensor}``), copied once into shared memory.
        version: their policy version.
        start_timeout_s: seconds a worker may take to start (imports, model load).
        answer_timeout_s: seconds a worker may go without sending anything while it has work.
    Raises:
        EngineWorkerError: a worker failed to start (its traceback) or not in time.
    """

    def __init__(self, n: int, spec: EngineSpec, state: Mapping, version: int, *, start_timeout_s: float = 600.0,
                 answer_timeout_s: float = 1800.0) -> None:
        from agentrl.llm.weight_sync import SharedWeights, spawn_context

        self.n, self.spec, self.restarts, self.policy_version = n, spec, 0, int(version)
        self.start_timeout_s, self.answer_timeout_s = start_timeout_s, answer_timeout_s
        self._ctx, self._shared = spawn_context(), SharedWeights(state, self.policy_version)
        self._procs: list = [None] * n
        self._conns: list = [None] * n
        self._pids: list[int | None] = [None] * n
        self._closed = False
        self._finalizer = weakref.finalize(self, _stop, self._procs, self._conns)
        for i in range(n):
            self._start(i)
        for i in range(n):
            self._ready(i)

    # ---------------------------------------------------------------- lifecycle
    def _start(self, i: int) -> None:
        parent, child = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(target=_serve, args=(child, self.spec, self._shared, self.policy_version),
                                 daemon=False, name=f"agentrl-engine-{i}")
        proc.start()
        child.close()
        self._procs[i], self._conns[i], self._pids[i] = proc, parent, None

    def _ready(self, i: int) -> None:
        """Wait for worker ``i``'s ("ready", pid) once after each start."""
        if self._pids[i] is not None:
            return
        conn = self._conns[i]
        try:
            msg = conn.recv() if conn.poll(self.start_timeout_s) else ("timeout", f"no answer in {self.start_timeout_s}s")
        except (EOFError, OSError):
            self._procs[i].join(1.0)
            msg = ("died", f"exit code {self._procs[i].exitcode}")
        if msg[0] != "ready":
            self.close()
            raise EngineWorkerError(f"engine worker {i} failed to start ({msg[0]}): {msg[1]}")
        self._pids[i] = msg[1]

    def _restart(self, i: int) -> None:
        """Kill worker ``i`` and start a fresh one with the current weights (ready awaited lazily)."""
        proc = self._procs[i]
        if proc.is_alive():
            proc.kill()
        proc.join(5.0)
        self._conns[i].close()
        self._start(i)
        self.restarts += 1

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
        ``(i, msg)``, or ``(i, None)`` when worker ``i`` died or timed out (it is restarted)."""
        deadline = min(busy.values()) + self.answer_timeout_s
        handles = {self._conns[i]: i for i in busy} | {self._procs[i].sentinel: i for i in busy}
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
                self._restart(i)
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
        """Publish ``state`` as ``version`` in the shared buffer, then every worker loads it;
        returns once all have (a worker restarted meanwhile starts from the new buffer)."""
        self.publish(state, version)
        self._ask_all(("weights", self.policy_version), "weights_ok")

    def publish(self, state: Mapping, version: int) -> None:
        """Write ``state`` as ``version`` into the shared buffer and return: the workers load it
        on their own (asynchronous rollouts, ``agentrl.rollout.engines.stream``)."""
        self._shared.publish(state, version)
        self.policy_version = int(version)

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

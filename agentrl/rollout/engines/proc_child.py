"""The inside of a local engine worker process (``ProcessEngineWorkers``, ``agentrl.rollout.engines.procs``):
its message loop, where its weights come from, and how the parent stops the workers.

A worker's weights arrive by one of the two transports of ``rollout.weight_transport``:

- ``shared_memory`` (``agentrl.llm.weight_sync.SharedWeights``, handed to the process once at
  spawn): the trainer writes each version into buffers every worker maps; no socket is opened.
- ``broadcast`` (``agentrl.llm.weight_broadcast``): the worker joins the trainer's weight group
  at a ``GroupAddress`` (with the run's secret, inside the spawn arguments — a pipe, never the
  command line) and a receiver thread stages each pushed version.

Both give the worker the same three calls: ``wait(version, timeout_s)``, ``load_into(engine)``
and ``version``.
"""

from __future__ import annotations

import os
import time
import traceback

from agentrl.rollout.engines.interface import EngineSpec
from agentrl.rollout.engines.worker import EngineWorker, receiver_device, worker_environment

__all__ = ["serve", "stop", "TRANSPORTS"]

#: ``rollout.weight_transport`` values once ``auto`` is resolved.
TRANSPORTS = ("broadcast", "shared_memory")


def _weights(source, rank: int, layout, spec: EngineSpec):
    """This worker's weights: the ``SharedWeights`` it was handed, or a ``WeightReceiver`` that
    joins the group at the ``GroupAddress`` ``source`` (blocks until the group forms)."""
    if layout is None:
        return source
    from agentrl.llm.weight_broadcast import WeightReceiver

    return WeightReceiver(source, rank, layout, device=receiver_device(spec, source.backend))


def serve(conn, spec: EngineSpec, source, rank: int, layout, timeout_s: float) -> None:
    """Worker process loop: set the environment, build the engine, open its weights
    (``source``: a ``SharedWeights``, ``layout`` None; or the group's ``GroupAddress`` and its
    ``WeightLayout``, joined as ``rank``) and load the current version, then serve ("collect",
    cc) | ("stream", (cc, mode)) | ("weights", version) | ("score", (prompt, completion)) |
    ("probe", tokens) | ("env", None) until "close"/EOF. ``timeout_s``: how long a version may
    take to arrive."""
    try:
        worker_environment(spec)
        worker = EngineWorker(spec, None, -1)
        conn.send(("joining", os.getpid()))
        weights = _weights(source, rank, layout, spec)
        weights.wait(None, timeout_s=timeout_s)
        weights.load_into(worker.engine)
    except BaseException:
        conn.send(("init_error", traceback.format_exc()))
        return
    conn.send(("ready", os.getpid()))
    probe = None
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

                hooks = WorkerHooks(conn, weights, worker.engine, mode=arg[1],
                                    on_load=lambda v: probe and conn.send(("probe", (v, worker.score(*probe)[0]))))
                hooks.pull()
                try:
                    eps = worker.collect(arg[0], on_episode=lambda ep: conn.send(("episode", ep)), hooks=hooks)
                except StreamClosed:
                    break
                conn.send(("done", len(eps)))
            elif cmd == "weights":
                weights.wait(arg, timeout_s=timeout_s)
                conn.send(("weights_ok", weights.load_into(worker.engine)))
            elif cmd == "score":
                conn.send(("score", worker.score(*arg)))
            elif cmd == "probe":  # asynchronous rollouts: score these tokens after every load
                probe = arg
                conn.send(("probe_ok", None))
            elif cmd == "env":
                conn.send(("env", (os.environ.get("CUDA_VISIBLE_DEVICES"), spec.device)))
        except (BrokenPipeError, EOFError):
            break
        except Exception:
            conn.send(("error", traceback.format_exc()))
    weights.close()
    worker.close()


def stop(procs: list, conns: list, sender=None) -> None:
    """Ask every worker to close (and their weight receivers, through ``sender``: the
    ``WeightSender`` or None), kill what is alive after 5 s."""
    if sender is not None:
        sender.close()
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

"""``RayEngineWorkers``: rollout engine workers as Ray actors (``rollout.backend: ray``).

Each actor holds an ``EngineWorker`` body (engine + its own local ``EnvPool`` on the actor's
node). The actors sit in one placement group, one bundle each (``num_cpus_per_worker`` CPUs,
``num_gpus_per_worker`` GPUs — ``rollout.engine_gpus``; Ray then shows an actor only its own
GPUs in ``CUDA_VISIBLE_DEVICES`` and its engine uses ``cuda`` — and the custom node
``resources`` that keep it on the engine nodes: ``agentrl.rollout.engines.ray_placement``).
Weights travel over the broadcast group of ``agentrl.llm.weight_broadcast`` (the trainer's
node IP as Ray reports it, or ``broadcast_host``; gloo, each member's connections on its node
IP unless ``GLOO_SOCKET_IFNAME`` is set),
as with local workers: each actor joins it at start (``join``), loads the trainer's weights,
and after every push loads the new version when told (``load``) or on its own (streaming).

Collect is a streaming actor task (``num_returns="streaming"``): each finished episode comes
back as soon as it is done. Asynchronous rollouts (``EngineStream``) use ``send`` /
``next_messages``: the actor plays its queued shards in a thread (``stream``) and hands its
messages back through ``poll``. An actor that dies (``RayActorError``) or sends nothing for
``answer_timeout_s`` is killed and restarted in its bundle with the current weights, and the
episodes of its shard not yet received come back ``aborted`` — the contract of
``ProcessEngineWorkers``.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import traceback
from dataclasses import replace
from typing import Callable, Mapping, Sequence

from agentrl.rollout.collector import CollectConfig
from agentrl.rollout.engines.interface import EngineSpec, EngineWorkerError, WorkerScore, aborted_episodes, shard_config, shard_groups
from agentrl.rollout.engines.ray_placement import EnginePlacement, engine_bundle
from agentrl.rollout.engines.worker import EngineWorker, receiver_device, worker_environment
from agentrl.rollout.ray_backend import _require_ray, ensure_ray
from agentrl.types import Episode

_END = "__end__"


class _Inbox:
    """The plans a streaming actor was sent (``poll``/``recv`` like a pipe, for ``WorkerHooks``)."""

    def __init__(self) -> None:
        self.q: queue.Queue = queue.Queue()

    def poll(self) -> bool:
        return not self.q.empty()

    def recv(self):
        return self.q.get()


class _EngineActor:
    """Actor body around ``EngineWorker``; ``collect`` is a generator (streamed episodes)."""

    def __init__(self, spec: EngineSpec) -> None:
        worker_environment(replace(spec, visible_devices=None))  # Ray has set CUDA_VISIBLE_DEVICES
        self.spec, self.worker, self.weights = spec, EngineWorker(spec, None, -1), None
        self._inbox, self._outbox, self._thread = _Inbox(), queue.Queue(), None

    def ready(self) -> int:
        return os.getpid()

    def join(self, address, rank: int, layout) -> int:
        """Join the weight group (blocks until it forms), load the first push; its version."""
        from agentrl.llm.weight_broadcast import WeightReceiver

        if self.weights is not None:
            self.weights.close()
        import ray

        self.weights = WeightReceiver(address, rank, layout, device=receiver_device(self.spec, address.backend),
                                      bind=ray.util.get_node_ip_address())
        self.weights.wait(None, timeout_s=address.timeout_s)
        return self.weights.load_into(self.worker.engine)

    def load(self, version: int) -> int:
        self.weights.wait(version, timeout_s=600.0)
        return self.weights.load_into(self.worker.engine)

    def score(self, prompt_ids: list[int], completion_ids: list[int]):
        return self.worker.score(prompt_ids, completion_ids)

    def env(self) -> dict:
        """Where the actor runs: its ``CUDA_VISIBLE_DEVICES``, Ray's GPU ids, assigned resources,
        Ray node id and node IP."""
        import ray

        ctx = ray.get_runtime_context()
        return {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"), "gpu_ids": list(ray.get_gpu_ids()),
                "resources": dict(ctx.get_assigned_resources()), "device": self.spec.device,
                "node_id": ctx.get_node_id(), "ip": ray.util.get_node_ip_address()}

    def collect(self, cc: CollectConfig):
        """Yield each episode as it finishes (the collect runs in a thread feeding a queue)."""
        q: queue.Queue = queue.Queue()

        def run() -> None:
            try:
                self.worker.collect(cc, on_episode=q.put)
            except BaseException as exc:  # re-raised in the actor task below
                q.put(exc)
            q.put(_END)

        threading.Thread(target=run, daemon=True).start()
        while (item := q.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            yield item

    def stream(self, cc: CollectConfig, mode: str) -> None:
        """Queue a shard of an asynchronous stream (played by the stream thread)."""
        self._inbox.q.put(("stream", (cc, mode)))
        if self._thread is None:
            self._thread = threading.Thread(target=self._stream, daemon=True)
            self._thread.start()

    def _stream(self) -> None:
        from agentrl.rollout.engines.stream_worker import StreamClosed, WorkerHooks

        while True:
            cmd, arg = self._inbox.recv()
            if cmd == "close":
                return
            hooks = WorkerHooks(self._inbox, self.weights, self.worker.engine, mode=arg[1], on_load=self._probed)
            try:
                hooks.pull()
                eps = self.worker.collect(arg[0], on_episode=lambda ep: self._outbox.put(("episode", ep)), hooks=hooks)
            except StreamClosed:
                return
            except Exception:
                self._outbox.put(("error", traceback.format_exc()))
                continue
            self._outbox.put(("done", len(eps)))

    def set_probe(self, prompt_ids: list[int], completion_ids: list[int]) -> None:
        """Score these tokens after every load of the stream (reported as ``("probe", (v, lp))``)."""
        self.probe = (prompt_ids, completion_ids)

    def _probed(self, version: int) -> None:
        if getattr(self, "probe", None) is not None:
            self._outbox.put(("probe", (version, self.worker.score(*self.probe)[0])))

    def poll(self, max_wait_s: float) -> list:
        """The stream's messages so far, waiting up to ``max_wait_s`` for the first."""
        out = []
        try:
            out.append(self._outbox.get(timeout=max_wait_s))
            while True:
                out.append(self._outbox.get_nowait())
        except queue.Empty:
            return out

    def close(self) -> None:
        self._inbox.q.put(("close", None))
        if self.weights is not None:
            self.weights.close()
        self.worker.close()


class RayEngineWorkers:
    """``n`` engine actors (the ``EngineWorkers`` interface).

    Args:
        n: actors (≥ 1). spec: how each builds its engine.
        state: the trainer's inference weights (``{name: tensor}``). version: their version.
        num_cpus_per_worker: Ray CPUs each actor reserves (its bundle).
        num_gpus_per_worker: Ray GPUs each actor reserves (``rollout.engine_gpus``; 0 on CPU).
        resources: custom Ray resources each actor reserves (``rollout.placement.engine_resources``).
        placement_strategy: the placement group's strategy (``PACK``: few nodes; ``SPREAD``; ...).
        separate_nodes: refuse a bundle on this process's (the trainer's) node.
        broadcast_host / broadcast_ports: the weight store's address (None: this node's IP as
            Ray reports it) and (first, last) port range (None: any free port).
        start_timeout_s / answer_timeout_s: see ``ProcessEngineWorkers``.
        ray_init: start a local Ray (``ensure_ray``) when none is running.
    Attributes:
        nodes: the Ray node id of each actor's bundle. trainer_node: this process's node id.
    Raises:
        ModuleNotFoundError: ray is not installed. EngineWorkerError: actors failed to start,
        could not be placed within ``start_timeout_s`` (the bundles asked for in the message),
        or landed on the trainer's node with ``separate_nodes``.
    """

    def __init__(self, n: int, spec: EngineSpec, state: Mapping, version: int, *, num_cpus_per_worker: float = 1.0,
                 num_gpus_per_worker: float = 0.0, resources: Mapping[str, float] | None = None,
                 placement_strategy: str = "PACK", separate_nodes: bool = False, broadcast_host: str | None = None,
                 broadcast_ports: tuple[int, int] | None = None, start_timeout_s: float = 600.0,
                 answer_timeout_s: float = 1800.0, ray_init: bool = True) -> None:
        from agentrl.llm.weight_broadcast import WeightLayout, WeightSender

        ray = self._ray = _require_ray()
        if ray_init:
            ensure_ray()
        self.n, self.spec, self.restarts, self.policy_version = n, spec, 0, int(version)
        self.start_timeout_s, self.answer_timeout_s = start_timeout_s, answer_timeout_s
        self.bundle = engine_bundle(num_cpus_per_worker, num_gpus_per_worker, resources)
        self._actors: list = [None] * n
        self._pids: list[int | None] = [None] * n
        self._polls: dict[int, object] = {}
        self._lock, self._closed, self.probe = threading.RLock(), False, None
        pl = self.placement = EnginePlacement(ray, n, self.bundle, strategy=placement_strategy,
                                              separate_nodes=separate_nodes, timeout_s=start_timeout_s)
        self.placement_group, self.nodes, self.trainer_node = pl.group, pl.nodes, pl.trainer_node
        self._sender = WeightSender(WeightLayout.of(state, int(spec.weight_bucket_mb * (1 << 20))), n,
                                    host=broadcast_host or ray.util.get_node_ip_address(), device="cpu",
                                    timeout_s=start_timeout_s, ports=broadcast_ports,
                                    bind=broadcast_host or ray.util.get_node_ip_address())
        try:
            address = self._sender.open()
            joins = [self._start(i, address) for i in range(n)]
            self._sender.form()
            self._sender.push(state, self.policy_version)
            ray.get(joins, timeout=start_timeout_s)
            self._pids = ray.get([a.ready.remote() for a in self._actors], timeout=start_timeout_s)
        except Exception as exc:  # RayActorError (the constructor raised), GetTimeoutError, a failed join
            self.close()
            raise EngineWorkerError(f"engine actors failed to start: {type(exc).__name__}: {exc}") from None

    def _start(self, i: int, address):
        """Create actor ``i`` in bundle ``i`` and ask it to join the weight group (its ref)."""
        cls = self._ray.remote(_EngineActor).options(**self.placement.options(i))
        self._actors[i] = cls.remote(self.spec)
        self._pids[i] = None
        return self._actors[i].join.remote(address, i + 1, self._sender.layout)

    def _restart(self, i: int, seen=None) -> None:
        """Kill actor ``i`` and start a fresh one in its bundle with the current weights (the
        weight group re-forms, the last push is sent again)."""
        with self._lock:
            if seen is not None and self._actors[i] is not seen:
                return
            try:
                self._ray.kill(self._actors[i], no_restart=True)
            except Exception:
                pass
            self._polls.pop(i, None)
            join = self._start(i, self._sender.regroup())
            self._sender.form()
            self._sender.resend()
            self._ray.get(join, timeout=self.start_timeout_s)
            self.restarts += 1
            if self.probe is not None:
                self._actors[i].set_probe.remote(*self.probe)

    def pids(self) -> list[int]:
        for i, a in enumerate(self._actors):
            if self._pids[i] is None:
                self._pids[i] = self._ray.get(a.ready.remote(), timeout=self.start_timeout_s)
        return list(self._pids)

    def worker_env(self) -> list[dict]:
        """Each actor's ``CUDA_VISIBLE_DEVICES``, Ray GPU ids, assigned resources and engine device."""
        return self._ray.get([a.env.remote() for a in self._actors], timeout=self.answer_timeout_s)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if getattr(self, "_sender", None) is not None:
            self._sender.close()
        refs = [a.close.remote() for a in self._actors if a is not None]
        try:
            self._ray.wait(refs, num_returns=len(refs), timeout=5.0)
        except Exception:
            pass
        for a in self._actors:
            try:
                self._ray.kill(a, no_restart=True)
            except Exception:
                pass
        self.placement.remove()

    def __enter__(self) -> "RayEngineWorkers":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _get_all(self, refs: dict[int, object]) -> dict[int, object]:
        """{actor: result}; an actor that died is restarted and left out."""
        out = {}
        for i, ref in refs.items():
            try:
                out[i] = self._ray.get(ref, timeout=self.answer_timeout_s)
            except self._ray.exceptions.RayTaskError as exc:
                raise EngineWorkerError(f"engine actor {i} raised: {exc}") from None
            except (self._ray.exceptions.RayActorError, self._ray.exceptions.GetTimeoutError):
                self._restart(i)
        return out

    def publish(self, state: Mapping, version: int) -> None:
        """Broadcast ``state`` as ``version``; the actors' receivers stage it (streaming actors
        load it on their own). A broadcast broken by a dead actor: that actor is restarted.

        Raises:
            EngineWorkerError: the broadcast failed and no actor was found dead.
        """
        self.policy_version = int(version)
        try:
            self._sender.push(state, version)
        except Exception as exc:
            with self._lock:  # (a restart by the stream's thread meanwhile re-formed the group already)
                for i, a in enumerate(list(self._actors)):
                    try:
                        self._ray.get(a.ready.remote(), timeout=10.0)
                    except Exception:
                        self._restart(i, seen=a)
                if self._sender.broken:
                    raise EngineWorkerError(f"the weight broadcast of version {version} failed: {exc}") from None

    def push_weights(self, state: Mapping, version: int) -> None:
        """Broadcast ``state`` as ``version``; every actor loads it (a restarted one starts from it)."""
        self.publish(state, version)
        self._get_all({i: a.load.remote(self.policy_version) for i, a in enumerate(self._actors)})

    def score(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> list[WorkerScore]:
        p, c = [int(x) for x in prompt_ids], [int(x) for x in completion_ids]
        answers = self._get_all({i: a.score.remote(p, c) for i, a in enumerate(self._actors)})
        answers.update({i: self._ray.get(self._actors[i].score.remote(p, c)) for i in range(self.n) if i not in answers})
        return [WorkerScore(i, *answers[i]) for i in range(self.n)]

    def set_probe(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> None:
        """``ProcessEngineWorkers.set_probe`` for actors."""
        p, c = self.probe = [int(x) for x in prompt_ids], [int(x) for x in completion_ids]
        self._ray.get([a.set_probe.remote(p, c) for a in self._actors], timeout=self.answer_timeout_s)

    # ------------------------------------------------------- asynchronous stream (EngineStream)
    def send(self, i: int, msg: tuple) -> None:
        """Queue a ``("stream", (cc, mode))`` shard on actor ``i``."""
        cmd, (cc, mode) = msg
        if cmd != "stream":
            raise ValueError(f"RayEngineWorkers.send serves 'stream' shards only, got {cmd!r}")
        self._actors[i].stream.remote(cc, mode)

    def next_messages(self, busy: dict[int, float], max_wait_s: float | None = None) -> list[tuple[int, tuple | None]]:
        """``ProcessEngineWorkers.next_messages`` for actors: ``(i, msg)``, or ``(i, None)`` when
        actor ``i`` died or timed out (it is restarted)."""
        ray, wait_s = self._ray, 1.0 if max_wait_s is None else max_wait_s
        with self._lock:
            for i in busy:
                if i not in self._polls:
                    self._polls[i] = (self._actors[i].poll.remote(wait_s), self._actors[i])
            refs = {self._polls[i][0]: i for i in busy}
        deadline = min(busy.values()) + self.answer_timeout_s
        ready, _ = ray.wait(list(refs), num_returns=1, timeout=max(0.0, min(deadline - time.monotonic(), wait_s + 5.0)))
        out, dead = [], []
        for ref in ready:
            i = refs[ref]
            actor = self._polls.pop(i)[1]
            try:
                out += [(i, m) for m in ray.get(ref)]
            except ray.exceptions.RayActorError:
                dead.append((i, actor))
        now = time.monotonic()
        dead += [(i, self._actors[i]) for i in busy if now >= busy[i] + self.answer_timeout_s and i not in {d for d, _ in dead}]
        for i, actor in dead:
            self._restart(i, seen=actor)
            out.append((i, None))
        return out

    def collect(self, cc: CollectConfig, on_episode: Callable[[Episode], None] | None = None) -> list[Episode]:
        ray = self._ray
        shards = {i: shard_config(cc, g) for i, g in enumerate(shard_groups(cc.n_groups, self.n)) if g}
        got: dict[int, list[Episode]] = {i: [] for i in shards}
        gens = {self._actors[i].collect.options(num_returns="streaming").remote(scc): i for i, scc in shards.items()}
        last, errors = {i: time.monotonic() for i in shards}, []
        while gens:
            deadline = min(last[i] for i in gens.values()) + self.answer_timeout_s
            ready, _ = ray.wait(list(gens), num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            dead = [g for g in gens if time.monotonic() >= last[gens[g]] + self.answer_timeout_s and g not in ready]
            for g in ready:
                i = gens[g]
                try:
                    ep = ray.get(next(g))
                except StopIteration:
                    del gens[g]
                    continue
                except ray.exceptions.RayTaskError as exc:
                    errors.append(f"engine actor {i} raised: {exc}")
                    del gens[g]
                    continue
                except ray.exceptions.RayActorError:
                    dead.append(g)
                    continue
                last[i] = time.monotonic()
                got[i].append(ep)
                if on_episode is not None:
                    on_episode(ep)
            for g in dead:
                i = gens.pop(g)
                self._restart(i)
                reason = (f"engine actor {i} died or went silent during collect; it was restarted with policy "
                          f"version {self.policy_version}")
                got[i] += aborted_episodes(shards[i], {e.episode_id for e in got[i]}, reason)
        if errors:
            raise EngineWorkerError("\n".join(errors))
        return sorted((e for eps in got.values() for e in eps), key=lambda e: e.episode_id)

"""Weight transport from the trainer to engine workers over a torch.distributed broadcast group.

A **separate, stateless process group** spans the trainer (rank 0: rank 0 of a data-parallel
run, or the one trainer process) and the K engine workers (ranks 1…K), beside any default
group torchrun made: a ``TCPStore`` served by the trainer (``init_method`` tcp://host:port,
port chosen by the OS) and a ``ProcessGroupGloo`` (CPU tensors) or ``ProcessGroupNCCL`` (CUDA
tensors; the same code) built on it directly — the pattern of vLLM's
``stateless_init_torch_distributed_process_group`` that verl, SkyRL and OpenRLHF use for their
trainer → engine weight groups. Nothing global is touched, so it coexists with FSDP2's group.

- **Layout** (``WeightLayout``, ``agentrl.llm.weight_layout``, plain data): the names, dtypes and shapes of the inference state
  dict, tied tensors sent once, cut into buckets of at most ``bucket_bytes`` (each tensor at a
  16-byte-aligned offset of one ``uint8`` buffer per bucket). Fixed for a run; the engines get
  it when they join.
- **Push** (``WeightSender.push``): the trainer writes ``push/<seq> = <version>`` in the store,
  then broadcasts every bucket. Each engine runs a receiver thread (``WeightReceiver``) that
  polls the store for the next key, receives the buckets into fresh buffers and *stages* them
  with their version; the engine loads the staged weights when it chooses (``load_into``): at
  once when the trainer asks (synchronous loop) or before its next generation round
  (asynchronous rollouts). Staged buffers are never written again, so no load can see
  half-written weights, and the engine records exactly the version it holds.
- **Regroup** after a worker restart: ``push/<seq> = rejoin <host>:<port>`` tells the live
  receivers to join a new group (new store) with the restarted worker; the trainer then
  re-sends its last push (kept as a host snapshot) so the new member holds the current version.
- **Bound, keyed and signed** (``agentrl.llm.weight_store``, issue 52): the store listens on the
  one address the engines dial (loopback for engines on the trainer's host), every key lives
  under a per-run secret, each control message carries an HMAC under it, and a receiver refuses
  a version lower than the one it holds. Gloo members bind their connections to loopback too
  when the store is on loopback. Engines on the trainer's host take the shared-memory transport
  by default (``rollout.weight_transport: auto``), which opens no socket at all.
- **Device sync** (NCCL): the receiver waits for each broadcast and synchronises its CUDA stream
  before staging, so a load never reads buffers still being written. CUDA IPC (an engine on the
  trainer's own GPU reading the trainer's tensors by handle) is not used here.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Mapping

import torch
import torch.distributed as dist

from agentrl.llm.weight_layout import ALIGN, WeightLayout
from agentrl.llm.weight_store import is_loopback, new_secret, scoped, serve_store, sign, verify

__all__ = ["GroupAddress", "WeightLayout", "WeightSender", "WeightReceiver", "ALIGN"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GroupAddress:
    """Where an engine joins the weight group: the trainer's store ``host:port`` (the
    ``init_method``), the group size (1 + engines), ``backend`` (``gloo`` | ``nccl``), the
    collective timeout in seconds and the run's ``secret`` (``weight_store``; not in the repr)."""

    host: str
    port: int
    world_size: int
    backend: str = "gloo"
    timeout_s: float = 600.0
    secret: str = field(default="", repr=False)

    @property
    def init_method(self) -> str:
        """``tcp://host:port``."""
        return f"tcp://{self.host}:{self.port}"


def _group(address: GroupAddress, rank: int, store: dist.Store, bind: str | None = None):
    """A process group of ``address.world_size`` ranks on ``store`` (the run's scoped store;
    not the default group). Gloo: this member's connections on the address ``bind`` (its node
    IP; the peers dial it) — loopback when the store is on loopback — unless
    ``GLOO_SOCKET_IFNAME`` names the interface or ``bind`` is None (the address the host name
    resolves to)."""
    if bind is None and is_loopback(address.host):
        bind = address.host
    timeout = timedelta(seconds=address.timeout_s)
    if address.backend == "nccl":
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, address.world_size, opts)
    if bind is None or os.environ.get("GLOO_SOCKET_IFNAME"):
        return dist.ProcessGroupGloo(store, rank, address.world_size, timeout)
    opts = dist.ProcessGroupGloo._Options()
    opts._timeout, opts._devices = timeout, [dist.ProcessGroupGloo.create_device(hostname=bind)]
    return dist.ProcessGroupGloo(store, rank, address.world_size, opts)


def _abort(pg) -> None:
    """Abort a process group (its pending collectives fail on every member); best effort."""
    abort = getattr(pg, "abort", None)
    try:
        if callable(abort):
            abort()
    except Exception:
        pass


def _broadcast(pg, buf: torch.Tensor) -> None:
    opts = dist.BroadcastOptions()
    opts.rootRank = 0
    pg.broadcast([buf], opts).wait()
    if buf.is_cuda:  # the collective ran on NCCL's stream: make the bytes visible to every stream
        torch.cuda.current_stream(buf.device).synchronize()


class WeightSender:
    """The trainer's side of the weight group (rank 0).

    Args:
        layout: the state dict's ``WeightLayout``. n_engines: engines that join (ranks 1…K).
        host: the address the engines reach the trainer at (127.0.0.1 for local workers, the
            node IP for engines on other nodes); the store listens on this address only.
        device: where bucket buffers are packed (``cuda`` for NCCL, else ``cpu``/gloo).
        timeout_s: collective and join timeout in seconds.
        ports: (first, last) ports the store may listen on, inclusive, the first free one
            taken (None: any free port); ``open`` raises ``RuntimeError`` when none is free.
        bind: the address this member's gloo connections use (see ``_group``; None: default).
    Thread-safe: pushes and regroups hold one lock.
    """

    def __init__(self, layout: WeightLayout, n_engines: int, *, host: str = "127.0.0.1", device: str = "cpu",
                 timeout_s: float = 600.0, ports: tuple[int, int] | None = None, bind: str | None = None) -> None:
        self.layout, self.n_engines, self.host, self.ports, self.bind = layout, int(n_engines), host, ports, bind
        self.device = torch.device(device)
        self.backend = "nccl" if self.device.type == "cuda" else "gloo"
        self.timeout_s = float(timeout_s)
        self._lock = threading.RLock()
        self._store = self._keys = self._pg = None
        self.secret = new_secret()  #: this run's (handed to the engines inside the GroupAddress)
        self._seq, self._old = 0, []
        self._snapshot: tuple[dict, int] | None = None
        self.pushes, self.bytes_sent = 0, 0

    def open(self) -> GroupAddress:
        """Serve a new store and return the address the engines join (the group forms in ``form``)."""
        with self._lock:
            if self._store is not None:
                self._old.append((self._store, self._keys, self._pg))
            self._store = serve_store(self.host, self.ports, self.timeout_s)
            self._keys, self._pg, self._seq = scoped(self._store, self.secret), None, 0
            return self._address()

    def _address(self) -> GroupAddress:
        return GroupAddress(self.host, int(self._store.port), self.n_engines + 1, self.backend, self.timeout_s,
                            self.secret)

    def _say(self, keys, port: int, seq: int, message: str) -> None:
        keys.set(f"push/{seq}", sign(self.secret, port, seq, message))

    def form(self) -> None:
        """Build the group (blocks until every engine of the address has joined)."""
        with self._lock:
            self._pg = _group(self._address(), 0, self._keys, self.bind)
            self._old.clear()  # the members have left the previous group's store

    def regroup(self) -> GroupAddress:
        """Tell the members of the current group to join a new one (``rejoin``) and return its
        address, for a restarted engine; then ``form`` and ``resend``."""
        with self._lock:
            old, keys, seq = self._store, self._keys, self._seq
            address = self.open()
            if old is not None:
                self._say(keys, int(old.port), seq, f"rejoin {address.host}:{address.port}")
            return address

    @property
    def broken(self) -> bool:
        """True after a failed push until the group is formed again."""
        return self._pg is None

    def push(self, state: Mapping[str, torch.Tensor], version: int) -> None:
        """Broadcast ``state`` (the layout's names; aliases may be absent) as policy ``version``;
        returns when every engine has received it (their receivers stage it). Keeps a host
        snapshot for ``resend``.

        Raises:
            KeyError: a name of the layout missing from ``state``. ValueError: a shape differs.
        """
        with self._lock:
            snapshot = {}
            for name, shape in zip(self.layout.names, self.layout.shapes):
                if name not in state:
                    raise KeyError(f"WeightSender.push: {name!r} missing; push the same state-dict layout every time")
                t = state[name]
                if tuple(t.shape) != shape:
                    raise ValueError(f"WeightSender.push: {name} has shape {tuple(t.shape)}, layout {shape}")
                snapshot[name] = t.detach().to("cpu", copy=True)
            self._snapshot = (snapshot, int(version))  # a regroup after a failed send re-sends this push
            self._send(state, int(version))

    def resend(self) -> None:
        """Broadcast the last push again (after ``regroup`` + ``form``: the restarted engine's weights)."""
        with self._lock:
            if self._snapshot is not None:
                self._send(*self._snapshot)

    def _send(self, state: Mapping[str, torch.Tensor], version: int) -> None:
        lay = self.layout
        self._say(self._keys, int(self._store.port), self._seq, str(version))
        self._seq += 1
        if self._pg is None:
            raise RuntimeError("the weight group is broken (a member died); regroup() and form() it again")
        try:
            with torch.no_grad():
                for first, end, nbytes in lay.buckets:
                    buf = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
                    for i in range(first, end):
                        t = state[lay.names[i]].detach()
                        n = t.numel() * t.element_size()
                        buf[lay.offsets[i]: lay.offsets[i] + n].view(t.dtype).view(t.shape).copy_(t)
                    _broadcast(self._pg, buf)
                    self.bytes_sent += nbytes
        except Exception:  # a member died: abort, so the live members' pending receives fail and they
            _abort(self._pg)  # go back to the store, where regroup() tells them where to rejoin
            self._pg = None
            raise
        self.pushes += 1

    def close(self) -> None:
        """Tell the receivers to stop (idempotent)."""
        with self._lock:
            if self._store is not None:
                try:
                    self._say(self._keys, int(self._store.port), self._seq, "close")
                except Exception:
                    pass
            self._store = self._keys = self._pg = None


class WeightReceiver:
    """An engine's side of the weight group (rank ``rank`` ≥ 1): a thread that receives every
    push into fresh buffers and stages it with its version (see the module docstring).

    Args:
        address: the trainer's ``GroupAddress``. rank: this engine's rank (worker index + 1).
        layout: the trainer's ``WeightLayout``.
        device: where the buffers are received (the engine's device; ``cuda`` with NCCL).
        poll_s: seconds between looks at the store for the next push.
        bind: the address this member's gloo connections use (its node IP; None: default).
    The constructor blocks until the group forms (every member and the trainer joined).
    Attributes:
        version: the staged version (-1 before the first push).
    """

    def __init__(self, address: GroupAddress, rank: int, layout: WeightLayout, device: str = "cpu",
                 poll_s: float = 0.01, bind: str | None = None) -> None:
        self.layout, self.rank, self.poll_s, self.bind = layout, int(rank), poll_s, bind
        self.device = torch.device(device)
        self._cv = threading.Condition()
        self._staged: dict | None = None
        self._version, self._error, self._stop = -1, None, False
        self._store, self._pg = self._join(address)
        self._thread = threading.Thread(target=self._run, name="agentrl-weight-receiver", daemon=True)
        self._thread.start()

    def _join(self, address: GroupAddress):
        store = scoped(dist.TCPStore(address.host, address.port, None, False, timedelta(seconds=address.timeout_s)),
                       address.secret)
        self._address = address
        return store, _group(address, self.rank, store, self.bind)

    @property
    def version(self) -> int:
        """The staged version (-1 before the first push).

        Raises:
            RuntimeError: the receiver thread failed (its error).
        """
        with self._cv:
            self._raise()
            return self._version

    def _raise(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"weight receiver of engine rank {self.rank} failed: {self._error}")

    def wait(self, version: int | None = None, timeout_s: float | None = None) -> int:
        """Block until ``version`` (None: any) is staged; returns the staged version.

        Raises:
            TimeoutError: not within ``timeout_s``. RuntimeError: the receiver failed.
        """
        def got() -> bool:
            return self._version >= 0 if version is None else self._version == int(version)

        with self._cv:
            self._cv.wait_for(lambda: self._error is not None or self._stop or got(), timeout_s)
            self._raise()
            if not got():
                raise TimeoutError(f"engine rank {self.rank}: weights version {version} not received "
                                   f"(staged {self._version})")
            return self._version

    def load_into(self, engine) -> int:
        """Load the staged weights into ``engine`` (``engine.update_weights``) as their version;
        returns it. The staged buffers are then released (the engine holds the weights).

        Raises:
            RuntimeError: nothing staged yet, or the receiver failed.
        """
        with self._cv:
            self._raise()
            staged, version = self._staged, self._version
        if staged is None:
            if version < 0:
                raise RuntimeError(f"engine rank {self.rank}: no weights received yet")
            return version  # already loaded
        engine.update_weights(staged, version)
        with self._cv:
            if self._staged is staged:
                self._staged = None
        return version

    def _next(self, seq: int) -> str | None:
        """The verified control message at ``seq``, None while there is none (a value that does
        not verify is ignored — logged once — until the trainer's own write replaces it)."""
        key = f"push/{seq}"
        if not self._store.check([key]):
            return None
        value = self._store.get(key).decode()
        message = verify(self._address.secret, self._address.port, seq, value)
        if message is None and self._ignored != (self._address.port, seq, value):
            self._ignored = (self._address.port, seq, value)
            log.warning("engine rank %d: ignored a weight-group message without the run's signature at %s "
                        "(written by another process; firewall the weight store's port)", self.rank, key)
        return message

    def _run(self) -> None:
        seq = 0
        self._ignored = None
        try:
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)
            while not self._stop:
                value = self._next(seq)
                if value is None:
                    time.sleep(self.poll_s)
                    continue
                if value == "close":
                    break
                if value.startswith("rejoin "):
                    host, port = value.split(" ", 1)[1].rsplit(":", 1)
                    self._pg = None
                    a = self._address
                    self._store, self._pg = self._join(GroupAddress(host, int(port), a.world_size, a.backend,
                                                                    a.timeout_s, a.secret))
                    seq = 0
                    continue
                if int(value) < self._version:
                    raise RuntimeError(f"the trainer pushed policy version {value} after {self._version}: an engine "
                                       "accepts only versions that do not go back")
                seq += 1
                try:
                    staged = self._receive()
                except RuntimeError:  # the trainer aborted this push (a member died): wait for its regroup
                    _abort(self._pg)
                    continue
                with self._cv:
                    self._staged, self._version = staged, int(value)
                    self._cv.notify_all()
        except BaseException as exc:  # surfaced by version / wait / load_into
            with self._cv:
                self._error = f"{type(exc).__name__}: {exc}"
        finally:
            with self._cv:
                self._stop = True
                self._cv.notify_all()

    def _receive(self) -> dict[str, torch.Tensor]:
        lay, out = self.layout, {}
        for first, end, nbytes in lay.buckets:
            buf = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
            _broadcast(self._pg, buf)
            for i in range(first, end):
                dtype = getattr(torch, lay.dtypes[i])
                n = int(torch.Size(lay.shapes[i]).numel()) * torch.empty(0, dtype=dtype).element_size()
                out[lay.names[i]] = buf[lay.offsets[i]: lay.offsets[i] + n].view(dtype).view(lay.shapes[i])
        for name, src in lay.aliases:
            out[name] = out[src]
        return out

    def close(self) -> None:
        """Stop the receiver thread (it leaves at its next look at the store; waited for up to
        1 s, so a process can exit without a thread inside the group)."""
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(1.0)

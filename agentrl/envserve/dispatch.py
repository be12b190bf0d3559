"""``PoolHub``: one ``EnvPool`` shared by many server sessions, each leasing one slot.

A protocol server (``agentrl.envserve.openenv_app``) runs every session's ``reset``/``step``
in its own thread; ``EnvPool`` is not thread-safe and steps its slots best in batches. The hub
owns the pool in one dispatcher thread: calls from any number of session threads queue up,
and each dispatcher round sends all the resets that are waiting as one ``pool.reset`` and all
the steps as one ``pool.step``, so sessions on different workers run in parallel and a hung
env is killed by the pool's own deadline (process isolation, unlike threads in one server).
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field

from agentrl.env.guards import DEFAULT_MAX_OBSERVATION_CHARS
from agentrl.env.pool import EnvPool, EnvResult


LEASE_WAIT_S = 5.0  #: seconds a new session waits for a slot that a closing session is about to release


class HubCapacityError(RuntimeError):
    """Every slot of the hub is leased (the server admits at most ``slots`` sessions)."""


@dataclass
class _Call:
    kind: str  # "reset" | "step"
    slot: int
    seed: int | None = None
    options: dict | None = None
    action: str = ""
    done: threading.Event = field(default_factory=threading.Event)
    result: EnvResult | None = None


class PoolHub:
    """``slots`` env slots of ``env_id`` behind a thread-safe, batching dispatcher.

    Args:
        env_id: registered env id (validated by ``EnvPool``).
        slots: number of slots, the most sessions served at once (>= 1).
        env_kwargs: constructor kwargs of every env.
        step_timeout_s / reset_timeout_s: the pool's deadlines, seconds; an env call past
            them is killed and answered with ``EnvResult.error``.
        num_workers: worker processes (default: the pool's, min(slots, cpus)).
        max_observation_chars: the longest observation the env may answer (``EnvPool``).
    Raises:
        KeyError: unknown env id. EnvPoolError: the env cannot be built.
    """

    def __init__(self, env_id: str, slots: int, *, env_kwargs: dict | None = None, step_timeout_s: float = 30.0,
                 reset_timeout_s: float = 120.0, num_workers: int | None = None,
                 max_observation_chars: int = DEFAULT_MAX_OBSERVATION_CHARS) -> None:
        self.env_id, self.slots = env_id, slots
        self.pool = EnvPool(env_id, slots, env_kwargs=env_kwargs, num_workers=num_workers,
                            step_timeout_s=step_timeout_s, reset_timeout_s=reset_timeout_s,
                            max_observation_chars=max_observation_chars)
        self._free = list(range(slots))
        self._lock = threading.Condition()
        self._queue: queue.Queue[_Call | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="agentrl-poolhub", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ slots
    def lease(self, wait_s: float = LEASE_WAIT_S) -> int:
        """A free slot for a new session, waiting up to ``wait_s`` seconds for one to be released.

        The wait covers a client that closes its session and at once opens the next: the server
        may run the old session's close after the new session's first reset arrives (seen under
        load: a 2-slot server refusing a 2-slot client's third episode).

        Raises:
            HubCapacityError: no slot was free within ``wait_s``.
        """
        with self._lock:
            if not self._lock.wait_for(lambda: self._free, timeout=wait_s):
                raise HubCapacityError(f"all {self.slots} slots of {self.env_id} are in use; "
                                       f"close a session or serve with more slots (--slots)")
            return self._free.pop(0)

    def release(self, slot: int) -> None:
        """Give ``slot`` back (idempotent); its episode is abandoned, the next lease resets it."""
        with self._lock:
            if slot not in self._free:
                self._free.append(slot)
                self._lock.notify()

    @property
    def in_use(self) -> int:
        """Number of leased slots."""
        with self._lock:
            return self.slots - len(self._free)

    # ------------------------------------------------------------ calls (any thread)
    def reset(self, slot: int, seed: int | None, options: dict | None = None) -> EnvResult:
        """Reset ``slot`` (blocks until the pool answers; ``error`` set on failure)."""
        return self._submit(_Call("reset", slot, seed=seed, options=options))

    def step(self, slot: int, action: str) -> EnvResult:
        """Step ``slot`` with ``action`` (blocks until the pool answers; ``error`` set on failure)."""
        return self._submit(_Call("step", slot, action=action))

    def _submit(self, call: _Call) -> EnvResult:
        if not self._thread.is_alive():
            raise RuntimeError("the env hub is closed")
        self._queue.put(call)
        call.done.wait()
        assert call.result is not None
        return call.result

    # ------------------------------------------------------------ dispatcher thread
    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            while True:  # everything that queued during the previous pool call goes in this round
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)
                    break
                batch.append(nxt)
            self._dispatch(batch)

    def _dispatch(self, batch: list[_Call]) -> None:
        resets = [c for c in batch if c.kind == "reset"]
        steps = [c for c in batch if c.kind == "step"]
        try:
            if resets:
                res = self.pool.reset([c.slot for c in resets], [c.seed for c in resets], [c.options for c in resets])
                for c in resets:
                    c.result = res[c.slot]
            if steps:
                res = self.pool.step({c.slot: c.action for c in steps})
                for c in steps:
                    c.result = res[c.slot]
        except Exception as exc:  # a bad call (e.g. step before reset): answer each waiting call
            for c in batch:
                if c.result is None:
                    c.result = EnvResult("", 0.0, False, False, {}, error=f"{type(exc).__name__}: {exc}")
        finally:
            for c in batch:
                if c.result is None:
                    c.result = EnvResult("", 0.0, False, False, {}, error="the env hub stopped")
                c.done.set()

    def close(self) -> None:
        """Stop the dispatcher and the pool (idempotent)."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(10.0)
        self.pool.close()

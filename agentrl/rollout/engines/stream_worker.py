"""The worker side of asynchronous rollouts (``agentrl.rollout.engines.stream``): the
``CollectHooks`` a streaming engine worker plugs into ``collect`` — queued plans joining the
collect in progress, and when to load newer weights (``rollout.on_weight_update``).
"""

from __future__ import annotations

from collections import deque

from agentrl.rollout.collector import CollectConfig
from agentrl.rollout.engines.interface import EngineWorkerError

#: ``rollout.on_weight_update`` values.
WEIGHT_UPDATE_MODES = ("continue", "drain")


class StreamClosed(Exception):
    """Raised inside a streaming worker's ``collect`` when the trainer closes the stream (the
    worker then closes its env pool and exits; the episodes in flight are abandoned)."""


class WorkerHooks:
    """``CollectHooks`` of a streaming engine worker (runs inside the worker process).

    Args:
        conn: the worker's pipe (queued ``("stream", (cc, mode))`` plans are read from it).
        shared: the worker's weights (``WeightReceiver`` or ``SharedWeights``: ``version``,
            ``load_into(engine)``). engine: the worker's engine.
        mode: ``continue`` | ``drain`` (see the module docstring).
        on_load: called with the version after each load (the worker's sync probe report).
    Raises:
        ValueError: unknown mode.
    """

    def __init__(self, conn, shared, engine, mode: str, on_load=None) -> None:
        if mode not in WEIGHT_UPDATE_MODES:
            raise ValueError(f"unknown rollout.on_weight_update {mode!r}; choose one of {WEIGHT_UPDATE_MODES}")
        self.conn, self.shared, self.engine, self.mode, self.on_load = conn, shared, engine, mode, on_load
        self._plans: deque[CollectConfig] = deque()

    def _read(self) -> None:
        """Queue the plans waiting in the pipe; ``StreamClosed`` on ``close`` (or a closed pipe)."""
        try:
            while self.conn.poll():
                cmd, arg = self.conn.recv()
                if cmd == "close":
                    raise StreamClosed()
                if cmd != "stream":
                    raise EngineWorkerError(f"engine worker got {cmd!r} while streaming; only 'stream' and 'close' are served")
                self._plans.append(arg[0])
        except (EOFError, OSError) as exc:
            raise StreamClosed() from exc

    def pull(self) -> None:
        """Load the shared weights when they are newer than the engine's."""
        if self.shared.version != self.engine.policy_version:
            version = self.shared.load_into(self.engine)
            if self.on_load is not None:
                self.on_load(version)

    def next_plan(self) -> CollectConfig | None:
        self._read()
        return self._plans.popleft() if self._plans else None

    def may_admit(self, n_active: int) -> bool:
        if self.mode == "continue" or self.shared.version == self.engine.policy_version:
            return True
        if n_active == 0:  # drained: load, then admit again
            self.pull()
            return True
        return False

    def before_round(self) -> None:
        self._read()
        if self.mode == "continue":
            self.pull()

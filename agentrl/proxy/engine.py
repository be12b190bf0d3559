"""The engine side of the proxy: a batching worker thread and the pause gate.

``EngineWorker`` owns the ``LLMClient``: one thread takes every pending request, groups
those with equal unseeded ``SamplingParams`` into one ``generate`` call (at most
``max_batch`` prompts), and runs seeded requests alone, so a seeded request samples the
same ids whatever else is in flight. Requests with a row seed of their own (``row_seeds`` of
one: an episode's ``turn_seeds``, ``agentrl.proxy.sessions``) batch together, their seeds in
``row_seeds``: each samples from its own generator, the same ids in any batch. ``Gate`` lets
the trainer pause admission around a weight update: ``pause`` stops admission and waits until
the calls in flight have finished, so no call straddles two policy versions; a call that
arrives meanwhile waits (``hold``, the default) or is answered 429 with ``Retry-After`` (``reject``).
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass, replace

import numpy as np

from agentrl.llm.base import Completion, LLMClient, SamplingParams
from agentrl.proxy.errors import WireError

#: What a call that arrives during a weight update gets (``Gate``).
WHILE_PAUSED = ("hold", "reject")


@dataclass
class _Job:
    prompt: np.ndarray
    sampling: SamplingParams
    future: Future
    top: int = 0
    grammar: object = None  # an agentrl.llm.grammar.Grammar, or None


class EngineWorker:
    """Serve ``generate`` requests from many threads with batched engine calls.

    Args:
        engine: any ``LLMClient``.
        max_batch: most prompts per engine call (≥ 1).
    """

    def __init__(self, engine: LLMClient, *, max_batch: int = 32) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.engine, self.max_batch = engine, max_batch
        self._q: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="agentrl-proxy-engine", daemon=True)
        self._thread.start()

    def submit(self, prompt_ids: np.ndarray, sampling: SamplingParams, top_logprobs: int = 0,
               grammar=None) -> Future:
        """Queue one prompt (int32[P]); the future resolves to its ``Completion`` (or raises
        the engine's exception). ``top_logprobs`` > 0 is passed to ``generate`` (jobs batch
        only with jobs asking for the same number); ``grammar`` (a compiled
        ``agentrl.llm.grammar.Grammar``) constrains this prompt's row (``generate(grammars=...)``)."""
        fut: Future = Future()
        self._q.put(_Job(np.asarray(prompt_ids, np.int32), sampling, fut, int(top_logprobs), grammar))
        return fut

    def generate(self, prompt_ids: np.ndarray, sampling: SamplingParams) -> Completion:
        """Blocking ``submit(...).result()``."""
        return self.submit(prompt_ids, sampling).result()

    def close(self) -> None:
        """Stop the worker thread after the queued requests."""
        self._q.put(None)
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while True:
            job = self._q.get()
            if job is None:
                return
            jobs = [job]
            while True:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._q.put(None)
                    break
                jobs.append(nxt)
            for batch in _batches(jobs, self.max_batch):
                self._run(batch)

    def _run(self, batch: list[_Job]) -> None:
        live = [j for j in batch if j.future.set_running_or_notify_cancel()]
        if not live:
            return
        try:
            kw = {"top_logprobs": live[0].top} if live[0].top else {}
            if any(j.grammar is not None for j in live):
                kw["grammars"] = [j.grammar for j in live]
            sampling = live[0].sampling
            if all(j.sampling.row_seeds is not None and len(j.sampling.row_seeds) == 1 for j in live):  # own seeds
                sampling = replace(sampling, row_seeds=tuple(j.sampling.row_seeds[0] for j in live))
            outs = self.engine.generate([j.prompt for j in live], sampling, **kw)
        except BaseException as exc:  # noqa: BLE001 - handed to every waiting caller
            for j in live:
                j.future.set_exception(exc)
            return
        for j, out in zip(live, outs):
            j.future.set_result(out)


def _batches(jobs: list[_Job], max_batch: int) -> list[list[_Job]]:
    """Group jobs with equal unseeded sampling params and ``top`` (order kept); seeded jobs alone; row-seeded
    jobs (``row_seeds`` of one) with those whose params are equal but for their row seed."""
    groups: dict[tuple[SamplingParams, int], list[_Job]] = {}
    out: list[list[_Job]] = []
    for j in jobs:
        rows = j.sampling.row_seeds
        if (j.sampling.seed is not None and rows is None) or (rows is not None and len(rows) != 1):
            out.append([j])
            continue
        key = (replace(j.sampling, row_seeds=() if rows is not None else None), j.top)
        g = groups.setdefault(key, [])
        if not g:
            out.append(g)
        g.append(j)
        if len(g) == max_batch:
            del groups[key]
    return out


class Gate:
    """Admission gate for calls (thread-safe).

    ``enter`` blocks while paused (``hold``) or raises a 429 (``reject``); ``pause`` stops
    admission and waits for the calls in flight to leave; ``resume`` admits again.

    Args:
        while_paused: ``hold`` | ``reject`` (see the module docstring).
        retry_after_s: seconds a rejected call is told to wait (``Retry-After``), > 0.
    Raises:
        ValueError: an unknown ``while_paused`` or a non-positive ``retry_after_s``.
    """

    def __init__(self, while_paused: str = "hold", retry_after_s: float = 1.0) -> None:
        if while_paused not in WHILE_PAUSED:
            raise ValueError(f"while_paused must be one of {WHILE_PAUSED}, got {while_paused!r}")
        if not retry_after_s > 0:
            raise ValueError(f"retry_after_s must be > 0 seconds, got {retry_after_s}")
        self.while_paused, self.retry_after_s = while_paused, float(retry_after_s)
        self._cv = threading.Condition()
        self._paused = False
        self._in_flight = 0

    @property
    def paused(self) -> bool:
        return self._paused

    def enter(self) -> None:
        """Wait while paused (``hold``), then count one call in flight.

        Raises:
            WireError: 429 with ``Retry-After`` while paused in ``reject`` mode.
        """
        with self._cv:
            if self._paused and self.while_paused == "reject":
                raise WireError(429, "the policy's weights are being updated; retry after "
                                     f"{self.retry_after_s:g} s (Retry-After)", kind="rate_limit_error",
                                retry_after_s=self.retry_after_s)
            self._cv.wait_for(lambda: not self._paused)
            self._in_flight += 1

    def try_enter(self) -> bool:
        """Count one call in flight unless paused (never waits)."""
        with self._cv:
            if self._paused:
                return False
            self._in_flight += 1
            return True

    def leave(self) -> None:
        """The call has finished (recorded or failed)."""
        with self._cv:
            self._in_flight -= 1
            self._cv.notify_all()

    def pause(self, timeout_s: float | None = None) -> None:
        """Stop admitting calls and wait until none is in flight.

        Raises:
            TimeoutError: calls were still in flight after ``timeout_s`` seconds (the gate
                stays paused; call ``resume`` to undo).
        """
        with self._cv:
            self._paused = True
            if not self._cv.wait_for(lambda: self._in_flight == 0, timeout=timeout_s):
                raise TimeoutError(f"{self._in_flight} proxy call(s) still in flight after {timeout_s} s; "
                                   f"the gate stays paused (call resume() to undo)")

    def resume(self) -> None:
        """Admit calls again (waiting ones proceed)."""
        with self._cv:
            self._paused = False
            self._cv.notify_all()

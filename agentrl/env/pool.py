"""EnvPool: N text-env slots stepped in parallel worker processes, crash-isolated.

Each worker process (``multiprocessing`` "spawn" context by default, one ``Pipe`` per
worker) owns several slots (slot ``i`` lives in worker ``i % num_workers``) and steps them
one after the other; workers run in parallel. The parent watches every worker with a
per-step deadline: a worker whose next answer does not come within ``step_timeout_s``
(``reset_timeout_s`` for resets) of its previous answer is killed (SIGKILL, so a hang in C
code is caught too) and restarted; so is a worker whose process died. An env that raises
is rebuilt inside its worker; an answer that breaks the contract (a reward that is not a finite
number, an observation that is not text or is too long: ``agentrl.env.guards``) is an error
result too. In every case the slot's answer is an ``EnvResult`` with
``error`` set — the caller marks that episode ``EpisodeStatus.ENV_ERROR`` (stored, never
scored 0, PITFALLS P5) — and the pool keeps going. A restarted worker loses the episodes
of all its slots: each of them must be ``reset()`` again (a ``step`` on it answers with an
error naming the cause).

Workers build envs from the pickled ``gymnasium.EnvSpec`` of the id, so ids registered
at run time in the parent (e.g. test-only envs) work as long as their entry point is an
importable string.
"""

from __future__ import annotations

import multiprocessing as mp
import time
import traceback
import weakref
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Mapping, Sequence

import gymnasium

from agentrl.env.guards import DEFAULT_MAX_OBSERVATION_CHARS, check_observation, declared_reward_range, reward_value
from agentrl.env.registry import validate_id
from agentrl.env.slots import SlotBook
from agentrl.failures import tag_cause


@dataclass
class EnvResult:
    """One env answer for one slot.

    Attributes:
        obs: observation text ("" when ``error`` is set).
        reward: step reward (0.0 for resets and errors).
        terminated / truncated: gymnasium flags (False for resets and errors).
        info: the env's info dict (``anchor_obs``, ``admissible_actions``, ``won``,
            ``action_valid``, ...); empty when ``error`` is set.
        error: None, or why the env gave no valid answer (it raised, hung past the
            timeout, or its worker died). The slot's episode must be marked
            ``EpisodeStatus.ENV_ERROR`` and the slot needs ``reset()`` before more steps.
        elapsed_s: wall time of the env call inside the worker, seconds (for errors
            found by the parent: the time waited).
    """

    obs: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict = field(default_factory=dict)
    error: str | None = None
    elapsed_s: float = 0.0


def _error_result(msg: str, elapsed_s: float = 0.0) -> EnvResult:
    return EnvResult("", 0.0, False, False, {}, error=msg, elapsed_s=elapsed_s)


class EnvPoolError(RuntimeError):
    """The pool could not start: an env failed to construct in a worker (the message
    carries the worker's traceback) or a worker did not start within the timeout."""


# --------------------------------------------------------------------------- worker side

def _make_env(spec: gymnasium.envs.registration.EnvSpec, env_kwargs: dict):
    env = gymnasium.make(spec, disable_env_checker=True, **env_kwargs)
    declared_reward_range(env)  # a malformed declaration fails the pool's start, not every step
    return env


def _call_env(envs: dict, slot: int, cmd: str, item: tuple, spec, env_kwargs,
              max_observation_chars: int = DEFAULT_MAX_OBSERVATION_CHARS) -> EnvResult:
    """Run one reset/step on ``envs[slot]``; on an exception rebuild that env. An answer that
    breaks the contract (``agentrl.env.guards``: reward not a finite number in the declared
    range, observation not text or over ``max_observation_chars``) becomes an error result whose
    text carries the cause (``agentrl.failures.tag_cause``)."""
    t0 = time.perf_counter()
    try:
        env = envs[slot]
        if env is None:
            raise RuntimeError("the env of this slot could not be rebuilt after an earlier error")
        if cmd == "reset":
            obs, info = env.reset(seed=item[1], options=item[2])
            bad = check_observation(obs, max_observation_chars)
            res = EnvResult(obs, 0.0, False, False, info)
        else:
            obs, reward, term, trunc, info = env.step(item[1])
            value = reward_value(reward, declared_reward_range(env))
            bad = value if isinstance(value, tuple) else check_observation(obs, max_observation_chars)
            res = None if bad else EnvResult(obs, value, bool(term), bool(trunc), info)
        if bad:
            res = _error_result(tag_cause(bad[0], f"{cmd}: {bad[1]}"))
    except Exception as exc:  # the env raised: report it, rebuild the env
        res = _error_result(f"env raised {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        try:
            envs[slot].close()
        except Exception:
            pass
        try:
            envs[slot] = _make_env(spec, env_kwargs)
        except Exception:
            envs[slot] = None
    res.elapsed_s = time.perf_counter() - t0
    return res


def _worker_main(conn: Connection, spec, env_kwargs: dict, slots: list[int],
                 max_observation_chars: int = DEFAULT_MAX_OBSERVATION_CHARS) -> None:
    """Worker process loop: build the envs, then serve ("reset"|"step", items) messages,
    answering ("result", slot, EnvResult) once per item, until "close" or EOF."""
    envs: dict[int, Any] = {}
    try:
        for s in slots:
            envs[s] = _make_env(spec, env_kwargs)
    except BaseException:
        conn.send(("init_error", None, traceback.format_exc()))
        return
    conn.send(("ready", None, None))
    while True:
        try:
            cmd, items = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            break
        if cmd == "close":
            break
        for item in items:
            res = _call_env(envs, item[0], cmd, item, spec, env_kwargs, max_observation_chars)
            try:
                conn.send(("result", item[0], res))
            except (BrokenPipeError, OSError):
                return
            except Exception as exc:  # unpicklable obs/info
                conn.send(("result", item[0], _error_result(f"env answer could not be sent: {exc}")))
    for env in envs.values():
        try:
            if env is not None:
                env.close()
        except Exception:
            pass


# --------------------------------------------------------------------------- parent side

@dataclass
class _Worker:
    index: int
    slots: list[int]
    proc: Any = None
    conn: Connection | None = None


def _stop(workers: list[_Worker]) -> None:
    """Ask every worker to close, then kill what is still alive after 2 s."""
    for w in workers:
        try:
            if w.conn is not None:
                w.conn.send(("close", None))
        except (BrokenPipeError, OSError):
            pass
    deadline = time.monotonic() + 2.0
    for w in workers:
        if w.proc is not None:
            w.proc.join(max(0.0, deadline - time.monotonic()))
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join(1.0)
        if w.conn is not None:
            w.conn.close()
        w.proc, w.conn = None, None


class EnvPool:
    """``n`` env slots of one env id, stepped in parallel worker processes.

    Args:
        env_id: registered id (validated at once: unknown ids raise ``KeyError`` with
            suggestions before any process starts, PITFALLS P10).
        n: number of slots (≥ 1).
        env_kwargs: constructor kwargs for every env (as for ``agentrl.env.make``).
        num_workers: worker processes (default ``min(n, os.cpu_count())``).
        step_timeout_s: seconds one env step may take (measured between a worker's answers).
        reset_timeout_s: seconds one reset may take (game generation, env construction).
        start_method: multiprocessing start method, "spawn" (default) or "forkserver".
        max_observation_chars: the longest observation an env may answer, characters (longer:
            an error result, cause ``observation_too_large``; ``env.max_observation_chars``).
    Raises:
        KeyError: unknown env id. ValueError: bad n / num_workers / timeouts.
        EnvPoolError: an env failed to construct in a worker, or a worker did not start
            within ``reset_timeout_s``.

    Use as a context manager, or call ``close()`` (idempotent).
    """

    def __init__(self, env_id: str, n: int, *, env_kwargs: dict | None = None,
                 num_workers: int | None = None, step_timeout_s: float = 30.0,
                 reset_timeout_s: float = 120.0, start_method: str = "spawn",
                 max_observation_chars: int = DEFAULT_MAX_OBSERVATION_CHARS) -> None:
        validate_id(env_id)
        if n < 1:
            raise ValueError(f"EnvPool needs n >= 1 slots, got n={n}")
        if max_observation_chars < 1:
            raise ValueError(f"max_observation_chars must be >= 1 characters, got {max_observation_chars}")
        self.max_observation_chars = int(max_observation_chars)
        if step_timeout_s <= 0 or reset_timeout_s <= 0:
            raise ValueError("step_timeout_s and reset_timeout_s must be > 0 seconds")
        import os

        num_workers = min(n, os.cpu_count() or 1) if num_workers is None else num_workers
        if not 1 <= num_workers <= n:
            raise ValueError(f"num_workers must be in [1, n={n}], got {num_workers}")
        self.env_id, self.n = env_id, n
        self.step_timeout_s, self.reset_timeout_s = step_timeout_s, reset_timeout_s
        self._spec = gymnasium.spec(env_id)
        self._kwargs = dict(env_kwargs or {})
        self._ctx = mp.get_context(start_method)
        self._workers = [_Worker(i, list(range(i, n, num_workers))) for i in range(num_workers)]
        self._book = SlotBook(n, "EnvPool", _error_result)  # which slots lost their episode, and why
        self._finalizer = weakref.finalize(self, _stop, self._workers)
        for w in self._workers:
            self._start(w)
        self.restarts = 0  # number of worker restarts so far (a health metric)
        self._await_ready()

    # ---------------------------------------------------------------- lifecycle
    def _start(self, w: _Worker) -> None:
        parent, child = self._ctx.Pipe(duplex=True)
        w.proc = self._ctx.Process(target=_worker_main, args=(child, self._spec, self._kwargs, w.slots, self.max_observation_chars),
                                   daemon=True, name=f"agentrl-envpool-{w.index}")
        w.proc.start()
        child.close()
        w.conn = parent

    def _await_ready(self) -> None:
        deadline = time.monotonic() + self.reset_timeout_s
        for w in self._workers:
            ok = w.conn.poll(max(0.0, deadline - time.monotonic()))
            try:
                kind, _, tb = w.conn.recv() if ok else ("timeout", None, None)
            except (EOFError, OSError):
                kind, tb = "died", f"exit code {w.proc.exitcode}"
            if kind != "ready":
                self.close()
                raise EnvPoolError(f"EnvPool({self.env_id!r}) worker {w.index} failed to start "
                                   f"({kind}): {tb or f'no answer within {self.reset_timeout_s}s'}")

    def _restart(self, w: _Worker, reason: str) -> None:
        """Kill worker ``w`` and start a fresh one; all its slots need reset."""
        w.proc.kill()
        w.proc.join(5.0)
        w.conn.close()
        for s in w.slots:
            self._book.lost(s, f"its worker was restarted ({reason}); call reset() on this slot")
        self._start(w)
        self.restarts += 1

    @property
    def closed(self) -> bool:
        """True once ``close`` has run."""
        return self._book.closed

    def close(self) -> None:
        """Stop all workers (idempotent)."""
        if self._book.closed:
            return
        self._book.closed = True
        self._finalizer()

    def __enter__(self) -> "EnvPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---------------------------------------------------------------- calls
    def reset(self, slots: Sequence[int], seeds: Sequence[int],
              options: Sequence[dict | None] | None = None) -> dict[int, EnvResult]:
        """Reset ``slots`` with ``seeds`` (and per-slot ``options``), in parallel.

        Returns {slot: EnvResult} (obs, info of the reset; ``error`` set on failure).
        Raises: ValueError on mismatched lengths, bad or duplicate slots.
        """
        items = self._book.reset_items(slots, seeds, options)
        return self._book.after_reset(self._dispatch("reset", items, self.reset_timeout_s))

    def step(self, actions: Mapping[int, str]) -> dict[int, EnvResult]:
        """Step the given slots with their action texts, in parallel.

        Returns {slot: EnvResult} for exactly the given slots. A slot whose episode was
        lost (its env raised, hung or its worker died) answers with ``error`` set until it
        is reset. Raises: RuntimeError for a slot that was never reset; TypeError for a
        non-str action; ValueError for a bad slot.
        """
        items, early = self._book.step_items(actions)
        return self._book.after_step({**early, **self._dispatch("step", items, self.step_timeout_s)})

    def _dispatch(self, cmd: str, items: list[tuple], timeout: float) -> dict[int, EnvResult]:
        """Send items to their workers, collect one answer per item, kill/restart a worker
        whose next answer is later than ``timeout`` seconds or whose process died."""
        results: dict[int, EnvResult] = {}
        nw = len(self._workers)
        pending: dict[int, list[int]] = {}  # worker -> unanswered slots, in run order
        for w in self._workers:
            mine = [it for it in items if it[0] % nw == w.index]
            if not mine:
                continue
            try:
                w.conn.send((cmd, mine))
                pending[w.index] = [it[0] for it in mine]
            except (BrokenPipeError, OSError):
                self._fail(w, [it[0] for it in mine], "its worker process had died", results, 0.0)
        last = {i: time.monotonic() for i in pending}
        by_conn = {self._workers[i].conn: self._workers[i] for i in pending}
        while pending:
            now = time.monotonic()
            deadline = min(last[i] + timeout for i in pending)
            ready = wait([self._workers[i].conn for i in pending], timeout=max(0.0, deadline - now))
            for conn in ready:
                w = by_conn[conn]
                if w.index not in pending:
                    continue
                try:
                    kind, slot, payload = conn.recv()
                except (EOFError, OSError):
                    w.proc.join(0.5)
                    self._fail(w, pending.pop(w.index), f"worker process died (exit code "
                               f"{w.proc.exitcode})", results, time.monotonic() - last[w.index])
                    continue
                last[w.index] = time.monotonic()
                if kind == "init_error":
                    self._fail(w, pending.pop(w.index), f"restarted worker could not build the env: "
                               f"{payload}", results, 0.0)
                elif kind == "result":
                    results[slot] = payload
                    pending[w.index].remove(slot)
                    if not pending[w.index]:
                        del pending[w.index]
            now = time.monotonic()
            for i in [i for i in pending if now >= last[i] + timeout]:
                self._fail(self._workers[i], pending.pop(i), f"env call timed out after {timeout:g}s",
                           results, now - last[i])
        return results

    def _fail(self, w: _Worker, slots: list[int], reason: str, results: dict, waited: float) -> None:
        """Error results for ``slots`` (``slots[0]`` was running when ``reason`` happened,
        the rest were queued behind it in the same worker); siblings in ``w`` that already answered this call lose
        their episode too (the restart drops their env), so their answers become errors."""
        for s in slots[:1]:
            results[s] = _error_result(f"slot {s}: {reason}", waited)
        for s in slots[1:]:
            results[s] = _error_result(f"slot {s}: not run; its worker was restarted because slot "
                                       f"{slots[0]} failed ({reason})")
        for s in w.slots:
            if s in results and results[s].error is None:
                results[s] = _error_result(f"slot {s}: its worker was restarted ({reason}) after "
                                           "this slot answered; its episode is lost")
        self._restart(w, reason)

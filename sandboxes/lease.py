"""Sandbox leases: a lifetime that must cover an episode's deadline plus its scoring
(PITFALLS P8).

A lease wraps any ``Sandbox`` for one episode. It refuses, with ``SandboxExpiredError``, a
run that would start after the lease ended or could outlast it, instead of starting work
against a sandbox that is being torn down. ``SandboxLease.for_episode`` sizes the lifetime
as deadline + scoring timeout + buffer, so a run-to-the-cap episode still gets scored.
"""

from __future__ import annotations

import time
from typing import Callable, Mapping, Sequence

from agentrl_sandboxes.base import ExecResult, Limits, Sandbox, SandboxExpiredError


class SandboxLease:
    """``sandbox`` usable for ``lifetime_s`` seconds from construction.

    Args:
        sandbox: the backend doing the work (not closed by the lease).
        lifetime_s: seconds the lease lasts (> 0).
        clock: monotonic clock in seconds (injectable for tests).
    Raises:
        ValueError: ``lifetime_s <= 0``.
    """

    def __init__(self, sandbox: Sandbox, lifetime_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not lifetime_s > 0:
            raise ValueError(f"lifetime_s must be > 0 seconds, got {lifetime_s}")
        self.sandbox, self.lifetime_s, self._clock = sandbox, float(lifetime_s), clock
        self.expires_at = clock() + self.lifetime_s
        self.name = getattr(sandbox, "name", "sandbox")

    @classmethod
    def for_episode(cls, sandbox: Sandbox, *, deadline_s: float, scoring_timeout_s: float,
                    buffer_s: float = 30.0) -> "SandboxLease":
        """A lease of ``deadline_s + scoring_timeout_s + buffer_s`` seconds (P8 property:
        lifetime ≥ rollout deadline + scoring)."""
        if deadline_s <= 0 or scoring_timeout_s <= 0 or buffer_s < 0:
            raise ValueError("deadline_s and scoring_timeout_s must be > 0 and buffer_s >= 0 (seconds)")
        return cls(sandbox, deadline_s + scoring_timeout_s + buffer_s)

    def remaining_s(self) -> float:
        """Seconds left on the lease (negative once expired)."""
        return self.expires_at - self._clock()

    def run(self, cmd: Sequence[str] | None = None, *, code: str | None = None,
            files: Mapping[str, str | bytes] | None = None, stdin: str | bytes | None = None,
            env: Mapping[str, str] | None = None, timeout_s: float | None = None, memory_mb: int | None = None,
            limits: Limits | None = None) -> ExecResult:
        """``sandbox.run`` if the lease still covers ``timeout_s``.

        Raises:
            SandboxExpiredError: the lease ended, or fewer than ``timeout_s`` seconds remain.
        """
        need = timeout_s if timeout_s is not None else (limits.timeout_s if limits else 0.0)
        left = self.remaining_s()
        if left <= 0 or left < need:
            raise SandboxExpiredError(
                f"sandbox lease of {self.lifetime_s:.0f} s has {max(left, 0):.1f} s left, less than the "
                f"{need:.1f} s this run may take; size the lease as episode deadline + scoring timeout")
        return self.sandbox.run(cmd, code=code, files=files, stdin=stdin, env=env, timeout_s=timeout_s,
                                memory_mb=memory_mb, limits=limits)

    def close(self) -> None:
        """End the lease (the wrapped sandbox stays open for other leases)."""
        self.expires_at = self._clock()

"""Run a program in the sandbox under the scorer's own deadline (PITFALLS P8).

``run_guarded`` never blocks longer than its timeout: the sandbox call runs in a daemon
thread; on expiry, on a ``SandboxError`` (dead, expired or unavailable sandbox) or on any
other exception of the sandbox it returns an ``infra_error`` instead of a verdict, so the
episode is flagged (status env_error) rather than scored 0, and later calls proceed.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Mapping

from agentrl_sandboxes import ExecResult, Sandbox

#: Longest observation text shown to the agent (characters; the tail is kept).
MAX_FEEDBACK_CHARS = 2000


@dataclass(frozen=True, slots=True)
class Outcome:
    """Result of one guarded run: ``result`` (None on infrastructure failure),
    ``infra_error`` (None when the sandbox answered) and wall seconds spent waiting."""

    result: ExecResult | None
    infra_error: str | None
    waited_s: float


def run_guarded(sandbox: Sandbox, code: str, *, exec_timeout_s: float, scoring_timeout_s: float,
                memory_mb: int = 1024, files: Mapping[str, str] | None = None) -> Outcome:
    """Run Python ``code`` (with ``files`` in its work dir) in ``sandbox`` with
    ``exec_timeout_s`` for the program and a hard ``scoring_timeout_s`` for the whole call
    (must exceed ``exec_timeout_s``).

    Raises:
        ValueError: ``scoring_timeout_s <= exec_timeout_s``.
    """
    import time

    if scoring_timeout_s <= exec_timeout_s:
        raise ValueError(f"scoring_timeout_s ({scoring_timeout_s}) must exceed exec_timeout_s ({exec_timeout_s}) "
                         "to leave room for sandbox start-up and clean-up")
    box: dict[str, object] = {}

    def call() -> None:
        try:
            box["result"] = sandbox.run(code=code, files=files, timeout_s=exec_timeout_s, memory_mb=memory_mb)
        except Exception as exc:  # noqa: BLE001 - every sandbox failure is an infra failure here
            box["error"] = f"{type(exc).__name__}: {exc}"

    start = time.monotonic()
    worker = threading.Thread(target=call, name="sandbox-scoring", daemon=True)
    worker.start()
    worker.join(scoring_timeout_s)
    waited = time.monotonic() - start
    if worker.is_alive():
        return Outcome(None, f"sandbox did not answer within the scoring timeout of {scoring_timeout_s:.1f} s", waited)
    if "error" in box:
        return Outcome(None, str(box["error"]), waited)
    return Outcome(box["result"], None, waited)  # type: ignore[arg-type]


def tail(text: str, limit: int = MAX_FEEDBACK_CHARS) -> str:
    """``text`` cut to its last ``limit`` characters (with a marker when cut)."""
    return text if len(text) <= limit else "[... output cut ...]\n" + text[-limit:]


def describe_failure(result: ExecResult, exec_timeout_s: float, memory_mb: int) -> str:
    """Raw, template-free description of a failed run: the reason, then the output tail
    (the traceback with the failing assertion for a wrong answer)."""
    if result.timed_out:
        head = f"Timed out: the program did not finish within {exec_timeout_s:g} s (infinite loop or too slow?)."
    elif result.oom:
        head = f"Out of memory: the program exceeded {memory_mb} MB."
    else:
        head = f"Failed with exit code {result.exit_code}."
    body = (result.stdout[-500:] + "\n" + result.stderr).strip() if result.stdout.strip() else result.stderr.strip()
    return head + ("\n" + tail(body) if body else "")

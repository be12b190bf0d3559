"""Grade a HumanEval solution so that only tests that ran to completion and passed count.

The sandbox runs ``envs/code/check_harness.py`` (the trusted checker) with the solution in
``solution.py`` and the tests plus a fresh random nonce in ``check.spec``. A run passes only
when it exited 0 without timeout or OOM **and** its stdout has the line ``MARKER nonce``,
which the checker prints after ``check(candidate)`` returned. Exit status alone is never
trusted (``os._exit(0)``, ``sys.exit(0)`` or an exit hook would fake it). What the verdict
trusts, and what the solution cannot reach: docs/sandbox.md.
"""

from __future__ import annotations

import functools
import secrets
from dataclasses import dataclass
from pathlib import Path

from agentrl_envs.code.scoring import Outcome, run_guarded
from agentrl_envs.code.tasks import CodeTask, solution_program
from agentrl_sandboxes import ExecResult, Sandbox

#: First word of the checker's verdict line (``MARKER <nonce>``).
MARKER = "AGENTRL-CHECK-PASSED"


@dataclass(frozen=True, slots=True)
class Graded:
    """A graded attempt: the sandbox ``outcome`` (``result`` has the verdict line removed
    from stdout) and ``passed`` (every test ran and passed)."""

    outcome: Outcome
    passed: bool


@functools.lru_cache(maxsize=1)
def harness_source() -> str:
    """Text of the in-sandbox checker (``check_harness.py``, next to this module)."""
    return (Path(__file__).with_name("check_harness.py")).read_text()


def check_files(task: CodeTask, code: str, nonce: str) -> dict[str, str]:
    """The files of one check run: ``solution.py`` (prompt + agent code) and ``check.spec``
    (nonce line, entry-point line, then the prompt's helpers + tests; read and removed by
    the checker before the solution runs)."""
    spec = f"{nonce}\n{task.entry_point}\n{task.prompt}\n\n{task.test}\n"
    return {"solution.py": solution_program(task, code), "check.spec": spec}


def verdict(result: ExecResult, nonce: str) -> bool:
    """True iff the run exited 0 without timeout/OOM and printed ``MARKER nonce``."""
    return result.ok and f"{MARKER} {nonce}" in result.stdout.splitlines()


def _without_verdict(result: ExecResult, nonce: str) -> ExecResult:
    import dataclasses

    line = f"\n{MARKER} {nonce}\n"
    return dataclasses.replace(result, stdout=result.stdout.replace(line, "\n"))


def grade(sandbox: Sandbox, task: CodeTask, code: str, *, exec_timeout_s: float, scoring_timeout_s: float,
          memory_mb: int = 1024) -> Graded:
    """Run ``task``'s tests on ``code`` in ``sandbox`` (see the module docstring).

    ``exec_timeout_s``/``scoring_timeout_s``/``memory_mb`` as ``run_guarded`` (seconds,
    MiB; the solution's process and the checker each get ``memory_mb``). A sandbox failure
    is ``outcome.infra_error`` with ``passed`` False.

    Raises:
        ValueError: ``scoring_timeout_s <= exec_timeout_s``.
    """
    nonce = secrets.token_hex(16)
    outcome = run_guarded(sandbox, harness_source(), files=check_files(task, code, nonce),
                          exec_timeout_s=exec_timeout_s, scoring_timeout_s=scoring_timeout_s, memory_mb=memory_mb)
    if outcome.result is None:
        return Graded(outcome, False)
    passed = verdict(outcome.result, nonce)
    result = _without_verdict(outcome.result, nonce)
    return Graded(Outcome(result, outcome.infra_error, outcome.waited_s), passed)

"""``unsafe_local``: a plain subprocess with rlimits and a wall clock. NOT A SANDBOX.

For trusted code only (e.g. running the canonical solutions on a machine without bwrap or
Docker). The program runs as *your* user, sees your files and your network; children that
escape the process group survive the timeout. ``make_sandbox("auto")`` never picks it;
you must name it, and constructing it warns.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import warnings
from typing import Mapping, Sequence

from agentrl_sandboxes._proc import looks_like_oom, minimal_env, run_process, signal_of
from agentrl_sandboxes.base import ExecResult, Limits, SandboxError, build_request, resolve_limits
from agentrl_sandboxes.bwrap import limit_args


class UnsafeLocalSandbox:
    """Unisolated execution (``name = "unsafe_local"``): rlimits (CPU, AS, FSIZE, NOFILE;
    NPROC only when not root), a temporary work dir and a process-group kill at the wall
    clock. Same ``run`` signature as every ``Sandbox``.

    Args:
        limits: default ``Limits``.
        python: interpreter for ``code=`` runs (default: ``sys.executable``).
        slots: accepted for signature parity with the other backends; runs are not pooled.
    """

    name = "unsafe_local"

    def __init__(self, *, limits: Limits | None = None, python: str | None = None, slots: int = 1) -> None:
        if shutil.which("prlimit") is None:
            raise SandboxError("'prlimit' not found; install util-linux")
        self.limits = limits or Limits()
        self.python = python or sys.executable
        warnings.warn("unsafe_local runs code WITHOUT isolation (your uid, files and network); "
                      "use it for trusted code only", UserWarning, stacklevel=2)

    def run(self, cmd: Sequence[str] | None = None, *, code: str | None = None,
            files: Mapping[str, str | bytes] | None = None, stdin: str | bytes | None = None,
            env: Mapping[str, str] | None = None, timeout_s: float | None = None, memory_mb: int | None = None,
            limits: Limits | None = None) -> ExecResult:
        """Run ``cmd`` or ``code`` in a fresh temporary directory (see ``Sandbox``)."""
        lim = resolve_limits(self.limits, limits, timeout_s, memory_mb)
        req = build_request(cmd, code, files, stdin, env, lim, self.python)
        with tempfile.TemporaryDirectory(prefix="agentrl-unsafe-") as work:
            for rel, data in req.files.items():
                path = os.path.join(work, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as fh:
                    fh.write(data)
            nproc = None if os.geteuid() == 0 else lim.max_procs + 256  # root: NPROC would not apply
            raw = run_process([*limit_args(lim, nproc), *req.argv], env=minimal_env(req.env, work),
                              stdin=req.stdin, timeout_s=lim.timeout_s, max_output_bytes=lim.max_output_bytes,
                              cwd=work)
        stderr = raw.stderr.decode("utf-8", errors="replace")
        sig = signal_of(raw.returncode)
        return ExecResult(
            stdout=raw.stdout.decode("utf-8", errors="replace"), stderr=stderr, exit_code=raw.returncode,
            timed_out=raw.wall_killed or sig in (24, 9), oom=looks_like_oom(stderr), duration_s=raw.duration_s,
            backend=self.name, signal=sig, output_truncated=raw.truncated)

    def close(self) -> None:
        """Nothing to release."""

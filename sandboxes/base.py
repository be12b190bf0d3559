"""The ``Sandbox`` protocol, its result type and its errors.

Every backend (``bwrap``, ``docker``, ``unsafe_local``) implements ``Sandbox.run``: one
fresh, isolated execution per call, no state shared between calls, everything cleaned up
before ``run`` returns. Callers pick a backend by name through ``agentrl_sandboxes.make_sandbox``.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, field
from typing import Mapping, Protocol, Sequence, runtime_checkable

#: In-sandbox working directory (also $HOME) of every backend.
WORKDIR = "/sandbox"
#: File the ``code=`` argument is written to inside ``WORKDIR``.
CODE_FILE = "main.py"


class SandboxError(RuntimeError):
    """Base class: the sandbox itself failed (infrastructure), not the code it ran."""


class SandboxUnavailableError(SandboxError):
    """The requested backend cannot run on this machine (binary, daemon or kernel feature
    missing). The message says what is missing and how to fix it or which backend to use."""


class SandboxBusyError(SandboxError):
    """No execution slot became free before the caller's deadline."""


class SandboxExpiredError(SandboxError):
    """A run was requested past (or would outlast) the lifetime of a sandbox lease
    (PITFALLS P8)."""


@dataclass(frozen=True, slots=True)
class Limits:
    """Resource limits of one execution.

    Attributes:
        timeout_s: wall-clock limit (seconds); the whole process tree is killed at expiry.
        cpu_s: CPU-time limit per process (seconds, RLIMIT_CPU soft; hard = soft + 1);
            None → ``ceil(timeout_s)``.
        memory_mb: address-space limit (MiB, RLIMIT_AS) and, where a memory cgroup is
            usable, the cgroup limit.
        max_procs: processes + threads of the sandbox uid (RLIMIT_NPROC / pids cgroup).
        max_file_mb: largest file the code may write (MiB, RLIMIT_FSIZE).
        max_open_files: open file descriptors (RLIMIT_NOFILE).
        work_mb: size of the private work dir tmpfs (MiB); ``tmp_mb``: of the private /tmp;
            ``shm_mb``: of ``/dev/shm`` (POSIX shared memory, semaphores). These three
            are the only writable places of a bwrap run (``/`` and ``/dev`` are
            read-only), so files can take at most their sum of host RAM.
        max_output_bytes: bytes of stdout and of stderr kept each (head and tail kept,
            the middle replaced by a marker).
    """

    timeout_s: float = 10.0
    cpu_s: float | None = None
    memory_mb: int = 1024
    max_procs: int = 64
    max_file_mb: int = 50
    max_open_files: int = 256
    work_mb: int = 64
    tmp_mb: int = 64
    shm_mb: int = 16
    max_output_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 seconds, got {self.timeout_s}")
        for name in ("memory_mb", "max_procs", "max_file_mb", "max_open_files", "work_mb", "tmp_mb", "shm_mb"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_output_bytes < 64:
            raise ValueError(f"max_output_bytes must be >= 64, got {self.max_output_bytes}")

    @property
    def cpu_limit_s(self) -> int:
        """RLIMIT_CPU soft limit in whole seconds (≥ 1)."""
        import math

        return max(1, math.ceil(self.cpu_s if self.cpu_s is not None else self.timeout_s))


@dataclass(frozen=True, slots=True)
class ExecResult:
    """Outcome of one execution.

    Attributes:
        stdout, stderr: decoded output (UTF-8, undecodable bytes replaced), at most
            ``Limits.max_output_bytes`` each (``output_truncated`` tells).
        exit_code: exit status of the program; for a program killed by signal N it is
            128 + N (the shell convention, as bwrap reports it); -1 when never started.
        timed_out: the wall-clock or CPU-time limit ended the program.
        oom: the program ran out of memory (``MemoryError`` under RLIMIT_AS, or an OOM
            kill of the memory cgroup / container).
        duration_s: wall-clock seconds from launch to reaping (float).
        backend: the backend that ran it, e.g. ``"bwrap"``.
        signal: the terminating signal number, or None.
        output_truncated: stdout or stderr was longer than the cap.
    """

    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool
    oom: bool
    duration_s: float
    backend: str = ""
    signal: int | None = None
    output_truncated: bool = False

    @property
    def ok(self) -> bool:
        """Exit code 0 without timeout or OOM."""
        return self.exit_code == 0 and not self.timed_out and not self.oom


@dataclass(frozen=True, slots=True)
class ExecRequest:
    """A validated execution request (what ``Sandbox.run`` received).

    Attributes:
        argv: the command, argv[0] resolved inside the sandbox (e.g. ``("python3", "x.py")``).
        files: relative path inside the work dir → content (bytes).
        stdin: bytes fed to the program's standard input.
        env: extra environment variables.
        limits: the resource limits.
    """

    argv: tuple[str, ...]
    files: Mapping[str, bytes] = field(default_factory=dict)
    stdin: bytes = b""
    env: Mapping[str, str] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)


@runtime_checkable
class Sandbox(Protocol):
    """Isolated code execution. Implementations: ``BwrapSandbox``, ``DockerSandbox``,
    ``UnsafeLocalSandbox``; tests use fakes.

    ``run(cmd=None, *, code=None, files=None, stdin=None, env=None, timeout_s=10.0,
    memory_mb=1024, limits=None) -> ExecResult``: give exactly one of ``cmd`` (argv list)
    or ``code`` (Python source, run as ``/sandbox/main.py`` with the sandbox's Python).
    A program that fails, times out or runs out of memory is a normal ``ExecResult``;
    ``SandboxError`` is raised only when the sandbox itself fails. Thread-safe.
    """

    name: str

    def run(
        self,
        cmd: Sequence[str] | None = None,
        *,
        code: str | None = None,
        files: Mapping[str, str | bytes] | None = None,
        stdin: str | bytes | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        memory_mb: int | None = None,
        limits: Limits | None = None,
    ) -> ExecResult:
        """Run one program in a fresh sandbox; see the class docstring."""
        ...

    def close(self) -> None:
        """Release the backend's resources (idempotent)."""
        ...


def _as_bytes(value: str | bytes) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def check_relpath(path: str) -> str:
    """Normalised relative path inside the work dir; raises ``ValueError`` for absolute
    paths, ``..`` components or empty names."""
    norm = posixpath.normpath(path)
    if not path or path.startswith("/") or norm.startswith("..") or norm in (".", ""):
        raise ValueError(f"sandbox file path {path!r} must be a relative path inside the work dir (no '..')")
    return norm


def build_request(
    cmd: Sequence[str] | None,
    code: str | None,
    files: Mapping[str, str | bytes] | None,
    stdin: str | bytes | None,
    env: Mapping[str, str] | None,
    limits: Limits,
    python: str,
) -> ExecRequest:
    """Validate ``run`` arguments into an ``ExecRequest`` (shared by all backends).

    Raises:
        ValueError: both or neither of ``cmd``/``code``; an empty ``cmd``; a bad file path.
    """
    if (cmd is None) == (code is None):
        raise ValueError("give exactly one of cmd (an argv list) or code (Python source)")
    out_files = {check_relpath(p): _as_bytes(c) for p, c in (files or {}).items()}
    if code is not None:
        if CODE_FILE in out_files:
            raise ValueError(f"files may not contain {CODE_FILE!r} when code= is given (code is written there)")
        out_files[CODE_FILE] = _as_bytes(code)
        argv: tuple[str, ...] = (python, "-u", "-B", "-s", CODE_FILE)
    else:
        if isinstance(cmd, (str, bytes)) or not cmd:
            raise ValueError(f"cmd must be a non-empty argv list such as ['python3', 'x.py'], got {cmd!r}")
        argv = tuple(os.fspath(a) for a in cmd)
    return ExecRequest(argv=argv, files=out_files, stdin=_as_bytes(stdin or b""), env=dict(env or {}), limits=limits)


def resolve_limits(base: Limits, limits: Limits | None, timeout_s: float | None, memory_mb: int | None) -> Limits:
    """``limits`` (or the sandbox default ``base``) with ``timeout_s``/``memory_mb`` overrides."""
    import dataclasses

    out = limits or base
    changes = {}
    if timeout_s is not None:
        changes["timeout_s"] = float(timeout_s)
    if memory_mb is not None:
        changes["memory_mb"] = int(memory_mb)
    return dataclasses.replace(out, **changes) if changes else out

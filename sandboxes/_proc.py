"""Launch one host process tree with memfd-backed stdio, a wall-clock limit and a
process-group kill; shared by the ``bwrap`` and ``unsafe_local`` backends.

stdout/stderr go to anonymous in-memory files (``memfd_create``), so a program that prints
forever costs at most RLIMIT_FSIZE bytes and never blocks on a full pipe.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

_MEMORY_ERROR = re.compile(r"^(MemoryError|numpy\.core\._exceptions\._ArrayMemoryError|.*Cannot allocate memory)", re.M)


@dataclass(frozen=True, slots=True)
class RawRun:
    """Result of ``run_process``: exit status (128 + signal for signals), wall-clock
    seconds, captured output (bytes, capped) and whether the wall clock killed it."""

    returncode: int
    duration_s: float
    stdout: bytes
    stderr: bytes
    wall_killed: bool
    truncated: bool


def memfd_with(data: bytes, name: str = "sandbox-in") -> int:
    """An anonymous in-memory file holding ``data``, positioned at offset 0 (fd, int)."""
    fd = os.memfd_create(name, 0)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def read_capped(fd: int, cap: int) -> tuple[bytes, bool]:
    """First and last ``cap // 2`` bytes of the file behind ``fd`` (whole file if ≤ cap),
    with a marker naming the omitted byte count; returns (bytes, truncated)."""
    size = os.fstat(fd).st_size
    if size <= cap:
        return os.pread(fd, size, 0), False
    half = cap // 2
    head, tail = os.pread(fd, half, 0), os.pread(fd, half, size - half)
    return head + f"\n[... {size - 2 * half} bytes omitted ...]\n".encode() + tail, True


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the process group led by ``proc`` (ignores already-gone groups)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_children_first(proc: subprocess.Popen, grace_s: float = 2.0) -> None:
    """SIGKILL the children of ``proc`` and give ``proc`` ``grace_s`` seconds to reap them
    and exit, then SIGKILL its whole group.

    Used when ``proc`` is a reaper (``unshare --pid --fork``): killing the reaper first
    would orphan its pid-1 child to the host init, where it can linger as a zombie.
    """
    try:
        with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as fh:
            children = [int(x) for x in fh.read().split()]
    except OSError:
        children = []
    for pid in children:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    kill_tree(proc)


def run_process(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    stdin: bytes,
    timeout_s: float,
    max_output_bytes: int,
    pass_fds: Sequence[int] = (),
    cwd: str | None = None,
    killer: Callable[[subprocess.Popen], None] = kill_tree,
) -> RawRun:
    """Run ``argv`` as the leader of a new process group and wait at most ``timeout_s``
    seconds; on expiry ``killer`` ends it (default: SIGKILL to the whole group) and it is
    reaped.

    Raises:
        OSError: the launcher itself could not be executed (the caller turns this into a
            ``SandboxError``).
    """
    fds = [memfd_with(stdin, "stdin"), os.memfd_create("stdout", 0), os.memfd_create("stderr", 0)]
    try:
        start = time.monotonic()
        proc = subprocess.Popen(
            list(argv), stdin=fds[0], stdout=fds[1], stderr=fds[2], env=dict(env), cwd=cwd,
            pass_fds=tuple(pass_fds), process_group=0, close_fds=True,
        )
        wall_killed = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            wall_killed = True
            killer(proc)
        kill_tree(proc)  # anything the leader left behind in its group
        rc = proc.wait()
        duration = time.monotonic() - start
        out, t1 = read_capped(fds[1], max_output_bytes)
        err, t2 = read_capped(fds[2], max_output_bytes)
    finally:
        for fd in fds:
            os.close(fd)
    rc = 128 - rc if rc < 0 else rc  # Popen reports signals as -N
    return RawRun(rc, duration, out, err, wall_killed, t1 or t2)


def looks_like_oom(stderr: str) -> bool:
    """True when the program's error output ends in an out-of-memory error."""
    return bool(_MEMORY_ERROR.search(stderr[-4000:]))


def signal_of(returncode: int) -> int | None:
    """The signal number encoded as 128 + N in ``returncode`` (None for normal exits)."""
    return returncode - 128 if 128 < returncode < 128 + 65 else None


def minimal_env(extra: Mapping[str, str], home: str) -> dict[str, str]:
    """The environment every sandboxed program gets: PATH, HOME, a UTF-8 locale, unbuffered
    Python; ``extra`` overrides."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
    }
    env.update(extra)
    return env

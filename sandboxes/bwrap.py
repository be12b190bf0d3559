"""Default local backend: bubblewrap as an unprivileged per-slot uid (ENVIRONMENTS.md §4.2).

One run (as root) = ``setpriv --pdeathsig KILL → [sh (cgroup join)] → unshare --pid
(reaper) → setpriv (drop to the slot uid) → prlimit (CPU, AS, NPROC, FSIZE, NOFILE) →
bwrap --unshare-all --die-with-parent --new-session`` with a read-only
``/usr`` and ``/etc``, size-capped private tmpfs ``/tmp``, ``/dev/shm`` and ``/sandbox``
(the work dir, files copied in from memfds) as the only writable places (``/`` and ``/dev``
are remounted read-only), fresh pid/net/ipc/uts/user namespaces, and a parent wall
clock that SIGKILLs the reaper's child and then the process group (the pid namespaces take
every descendant with them; the reaper's namespace reaps bwrap's helper, which the host
init here would leave as a zombie counting against RLIMIT_NPROC). ``setpriv --pdeathsig``
ends the run if the calling thread dies. Nothing of a run touches the host disk; nothing
survives it. Measured overhead: ENVIRONMENTS.md §4.2 and ``benchmarks/sandbox.py``.
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
import shutil
import signal
import threading
from typing import Mapping, Sequence

from agentrl_sandboxes import cgroups
from agentrl_sandboxes._proc import kill_children_first, kill_tree, looks_like_oom, memfd_with, minimal_env, run_process, signal_of
from agentrl_sandboxes.base import (
    WORKDIR, ExecRequest, ExecResult, Limits, SandboxError, SandboxUnavailableError, build_request, resolve_limits,
)
from agentrl_sandboxes.interpreter import SandboxPython, find_python
from agentrl_sandboxes.slots import DEFAULT_BASE_UID, Slot, SlotPool

log = logging.getLogger("sandboxes")
_CG_JOIN = 'while [ "$1" != -- ]; do echo 0 > "$1" || exit 125; shift; done; shift; exec "$@"'
# As root, the chain runs in a fresh pid namespace owned by `unshare`: when bwrap's monitor
# exits, the kernel tears that namespace down and reaps bwrap's own pid-1 helper, which
# would otherwise linger as a zombie of the host init (counting against RLIMIT_NPROC).
_REAPER = ["unshare", "--pid", "--fork", "--kill-child", "--"]
_MERGED_USR = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_LAUNCHER_NOISE = re.compile(r"^unshare: [^\n]*\n?", re.M)
_PROBE_LOCK = threading.Lock()
_PROBED: dict[tuple, str | None] = {}


def rootfs_args(extra_ro: Sequence[str] = ()) -> list[str]:
    """bwrap arguments for the read-only system view: /usr, /etc, merged-/usr symlinks
    (or binds where /bin etc. are real directories), ``extra_ro`` dirs, /proc, /dev."""
    args = ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for name in _MERGED_USR:
        host = "/" + name
        if os.path.islink(host):
            args += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            args += ["--ro-bind", host, host]
    for path in extra_ro:
        args += ["--ro-bind", path, path]
    return args + ["--proc", "/proc", "--dev", "/dev"]


def file_args(files: Mapping[str, bytes]) -> tuple[list[str], list[int]]:
    """bwrap ``--dir``/``--file FD`` arguments copying ``files`` into the work dir, and the
    memfds to pass (the caller closes them)."""
    args, fds, dirs = [], [], set()
    for rel, data in files.items():
        parent = posixpath.dirname(rel)
        chain = []
        while parent and parent not in dirs:
            chain.append(parent)
            dirs.add(parent)
            parent = posixpath.dirname(parent)
        for d in reversed(chain):
            args += ["--dir", f"{WORKDIR}/{d}"]
        fd = memfd_with(data, "sandbox-file")
        fds.append(fd)
        args += ["--perms", "0644", "--file", str(fd), f"{WORKDIR}/{rel}"]
    return args, fds


def limit_args(limits: Limits, nproc: int | None) -> list[str]:
    """``prlimit`` arguments for one run (bytes for AS and FSIZE; no NPROC when None)."""
    mib = 1 << 20
    return [
        "prlimit", f"--cpu={limits.cpu_limit_s}:{limits.cpu_limit_s + 1}", f"--as={limits.memory_mb * mib}",
        *([f"--nproc={nproc}"] if nproc is not None else []), f"--fsize={limits.max_file_mb * mib}",
        f"--nofile={limits.max_open_files}", "--",
    ]


def uid_pids(uid: int) -> list[int]:
    """Pids of host processes whose real uid is ``uid`` (scans /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    out.append(int(entry))
            except FileNotFoundError:
                continue
    return out


class BwrapSandbox:
    """Bubblewrap backend (``name = "bwrap"``). Thread-safe; ``slots`` runs at a time.

    Args:
        slots: concurrent runs in this process, each on its own uid.
        limits: default ``Limits`` (per-call ``timeout_s``/``memory_mb``/``limits`` override).
        python: interpreter for ``code=`` runs (default: first world-readable one, see
            ``agentrl_sandboxes.interpreter``).
        base_uid: uid of slot 0 (root only; as non-root the caller's uid is used).
        use_cgroups: ``False`` (default: rlimits only), ``"auto"`` (per-slot pids + memory
            cgroups when writable) or ``True`` (required). Joining a v1 cgroup costs
            ~25 ms per run here (the kernel synchronises RCU on every attach), and the
            rlimits + tmpfs size caps already contain every payload, hence off by default.
    Raises:
        SandboxUnavailableError: bwrap/setpriv/prlimit missing, no usable interpreter, user
            namespaces refused, or cgroups required but not writable; the message says
            why and what to do (e.g. ``apt-get install bubblewrap``).
    """

    name = "bwrap"

    def __init__(self, slots: int = 4, *, limits: Limits | None = None, python: str | None = None,
                 base_uid: int = DEFAULT_BASE_UID, use_cgroups: bool | str = False) -> None:
        for tool in ("bwrap", "setpriv", "prlimit", "unshare"):
            if shutil.which(tool) is None:
                raise SandboxUnavailableError(
                    f"{tool!r} not found on PATH; install it with `apt-get install bubblewrap util-linux` "
                    "(scripts/setup.sh does) or use backend='docker'")
        self.limits = limits or Limits()
        self.python: SandboxPython = find_python(python)
        self.as_root = os.geteuid() == 0
        self.pool = SlotPool(slots, base_uid=base_uid)
        ok, why = cgroups.probe() if use_cgroups else (False, "disabled by use_cgroups=False")
        if use_cgroups is True and not ok:
            raise SandboxUnavailableError(f"use_cgroups=True but {why}")
        self.use_cgroups, self.cgroup_reason = ok and self.as_root, why
        self._groups: dict[int, cgroups.SlotCgroup] = {}
        self._probe()

    def _probe(self) -> None:
        key = (self.pool.base_uid, self.as_root)
        with _PROBE_LOCK:
            if key not in _PROBED:
                with self.pool.acquire() as slot:
                    raw = run_process(self._argv(slot, ExecRequest(("true",)), []), env=minimal_env({}, WORKDIR),
                                      stdin=b"", timeout_s=10.0, max_output_bytes=4096)
                err = raw.stderr.decode(errors="replace").strip()
                _PROBED[key] = None if raw.returncode == 0 else f"exit {raw.returncode}: {err}"
        if _PROBED[key] is not None:
            raise SandboxUnavailableError(
                f"bubblewrap cannot create a sandbox here ({_PROBED[key]}); unprivileged user namespaces are "
                "probably disabled (sysctl kernel.unprivileged_userns_clone=1, or run outside a container "
                "with a restrictive seccomp profile) — or use backend='docker'")

    def _group(self, slot: Slot) -> cgroups.SlotCgroup | None:
        if not self.use_cgroups:
            return None
        if slot.index not in self._groups:
            self._groups[slot.index] = cgroups.slot_cgroup(f"agentrl-sandbox-{slot.uid}")
        return self._groups[slot.index]

    def _argv(self, slot: Slot, req: ExecRequest, extra: list[str], group: cgroups.SlotCgroup | None = None) -> list[str]:
        lim = req.limits
        argv: list[str] = ["setpriv", "--pdeathsig", "KILL", "--"]  # dies with us, even if we are SIGKILLed
        if group is not None:
            argv += ["/bin/sh", "-c", _CG_JOIN, "sh", *group.procs_files, "--"]
        if self.as_root:
            nproc = lim.max_procs
            argv += [*_REAPER, "setpriv", f"--reuid={slot.uid}", f"--regid={slot.uid}", "--clear-groups", "--no-new-privs"]
        else:  # NPROC counts all processes of our uid: allow the ones already running
            nproc = lim.max_procs + len(uid_pids(os.getuid()))
        argv += limit_args(lim, nproc)
        argv += ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--hostname", "sandbox"]
        argv += rootfs_args()
        argv += ["--size", str(lim.tmp_mb << 20), "--tmpfs", "/tmp"]
        for path in self.python.bind_dirs:  # after the /tmp tmpfs, which would hide a venv under /tmp
            argv += ["--ro-bind", path, path]
        argv += ["--size", str(lim.work_mb << 20), "--tmpfs", WORKDIR, *extra]
        argv += ["--size", str(lim.shm_mb << 20), "--tmpfs", "/dev/shm"]
        # bwrap's own root and /dev are tmpfs without a size: read-only, else files there
        # take host RAM past every limit (issue 20 item 2); non-recursive, the caps stay rw
        argv += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", WORKDIR]
        return argv + ["--", *req.argv]

    def run(self, cmd: Sequence[str] | None = None, *, code: str | None = None,
            files: Mapping[str, str | bytes] | None = None, stdin: str | bytes | None = None,
            env: Mapping[str, str] | None = None, timeout_s: float | None = None, memory_mb: int | None = None,
            limits: Limits | None = None) -> ExecResult:
        """Run ``cmd`` or Python ``code`` in a fresh sandbox (see ``agentrl_sandboxes.base.Sandbox``).

        Raises:
            ValueError: bad arguments; SandboxBusyError: no slot free within the timeout;
            SandboxError: the launcher failed (not the program).
        """
        lim = resolve_limits(self.limits, limits, timeout_s, memory_mb)
        req = build_request(cmd, code, files, stdin, env, lim, self.python.executable)
        with self.pool.acquire(wait_s=max(60.0, 4 * lim.timeout_s)) as slot:
            return self._run_in_slot(slot, req)

    def _run_in_slot(self, slot: Slot, req: ExecRequest) -> ExecResult:
        lim = req.limits
        group = self._group(slot)
        mem_bytes = (lim.memory_mb + lim.work_mb + lim.tmp_mb + lim.shm_mb) << 20
        oom_before = group.configure(lim.max_procs, mem_bytes) if group else 0
        extra, fds = file_args(req.files)
        try:
            raw = run_process(self._argv(slot, req, extra, group), env=minimal_env(req.env, WORKDIR),
                              stdin=req.stdin, timeout_s=lim.timeout_s, max_output_bytes=lim.max_output_bytes,
                              pass_fds=fds, killer=kill_children_first if self.as_root else kill_tree)
        except OSError as exc:
            raise SandboxError(f"could not launch bwrap: {exc}") from exc
        finally:
            for fd in fds:
                os.close(fd)
        cg_oom = bool(group and group.oom_kills() > oom_before)
        self._sweep(slot, group)
        stderr = raw.stderr.decode("utf-8", errors="replace")
        if raw.returncode == 125 and group and "cgroup.procs" in stderr:
            raise SandboxError(f"could not join the slot cgroup: {stderr.strip()}")
        rc = raw.returncode
        if raw.wall_killed:  # we SIGKILLed it; drop the launcher's complaint about that
            rc, stderr = 128 + signal.SIGKILL, _LAUNCHER_NOISE.sub("", stderr)
        sig = signal_of(rc)
        cpu_killed = sig == signal.SIGXCPU or (sig == signal.SIGKILL and not cg_oom and not raw.wall_killed)
        return ExecResult(
            stdout=raw.stdout.decode("utf-8", errors="replace"), stderr=stderr, exit_code=rc,
            timed_out=raw.wall_killed or cpu_killed, oom=cg_oom or looks_like_oom(stderr),
            duration_s=raw.duration_s, backend=self.name, signal=sig, output_truncated=raw.truncated)

    def _sweep(self, slot: Slot, group: cgroups.SlotCgroup | None) -> None:
        """Kill anything still running on the slot's uid (the pid namespace should have
        taken it already; this keeps the next run of the slot clean even if not)."""
        if not self.as_root:
            return
        left = group.leftover_pids() if group else uid_pids(slot.uid)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if left:
            log.warning("sandbox slot uid %d: killed %d leftover process(es)", slot.uid, len(left))

    def close(self) -> None:
        """Remove the slot cgroups (idempotent). Runs need no other clean-up."""
        for group in self._groups.values():
            cgroups.remove(group)
        self._groups.clear()

"""Optional cgroup v1 limits (pids, memory) per sandbox slot, used when writable.

rlimits already contain every payload (ENVIRONMENTS.md §4.2); a cgroup adds an exact
process cap per slot and a memory cap that also counts tmpfs pages, and reports OOM kills.
Groups are created *below this process's own cgroup* (``/proc/self/cgroup``), so they stay
inside whatever limits the host put on us. cgroup v2 is not handled (``probe`` says so).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

_ROOT = "/sys/fs/cgroup"


@dataclass(frozen=True, slots=True)
class SlotCgroup:
    """The pids and memory cgroup directories of one slot."""

    pids_dir: str
    memory_dir: str

    @property
    def procs_files(self) -> tuple[str, str]:
        """The ``cgroup.procs`` files a launcher writes its pid into (pids, memory)."""
        return os.path.join(self.pids_dir, "cgroup.procs"), os.path.join(self.memory_dir, "cgroup.procs")

    def configure(self, max_procs: int, memory_bytes: int) -> int:
        """Set ``pids.max`` and ``memory.limit_in_bytes``; return the current OOM-kill count."""
        _write(os.path.join(self.pids_dir, "pids.max"), str(max_procs))
        _write(os.path.join(self.memory_dir, "memory.limit_in_bytes"), str(memory_bytes))
        return self.oom_kills()

    def oom_kills(self) -> int:
        """Cumulative OOM kills of this group (``oom_kill`` line of ``memory.oom_control``)."""
        with open(os.path.join(self.memory_dir, "memory.oom_control")) as fh:
            for line in fh:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        return 0

    def leftover_pids(self) -> list[int]:
        """Pids still in the slot's pids group (should be empty after every run)."""
        with open(os.path.join(self.pids_dir, "cgroup.procs")) as fh:
            return [int(x) for x in fh.read().split()]


def _write(path: str, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def _own_path(controller: str) -> str | None:
    with open("/proc/self/cgroup") as fh:
        for line in fh:
            _, names, path = line.rstrip("\n").split(":", 2)
            if controller in names.split(","):
                return path
    return None


def probe() -> tuple[bool, str]:
    """Whether per-slot v1 pids + memory cgroups can be created here, and why (not)."""
    if os.path.exists(os.path.join(_ROOT, "cgroup.controllers")):
        return False, "cgroup v2 hierarchy: per-slot cgroups not implemented, rlimits only"
    for ctrl in ("pids", "memory"):
        own = _own_path(ctrl)
        base = os.path.join(_ROOT, ctrl) + (own or "")
        if own is None or not os.path.isdir(base):
            return False, f"no cgroup v1 {ctrl} controller mounted at {_ROOT}/{ctrl}"
        if not os.access(base, os.W_OK):
            return False, f"{base} is not writable (not root, or read-only cgroupfs)"
    return True, "cgroup v1 pids + memory writable"


def slot_cgroup(name: str) -> SlotCgroup:
    """Create (or reuse) the cgroups ``<own cgroup>/<name>`` for pids and memory.

    Raises:
        OSError: the directories cannot be created (call ``probe`` first).
    """
    dirs = []
    for ctrl in ("pids", "memory"):
        path = os.path.join(_ROOT, ctrl) + (_own_path(ctrl) or "") + "/" + name
        os.makedirs(path, exist_ok=True)
        dirs.append(path)
    return SlotCgroup(*dirs)


def remove(group: SlotCgroup) -> None:
    """Remove the slot's cgroup directories (ignores busy or missing ones)."""
    for path in (group.pids_dir, group.memory_dir):
        try:
            os.rmdir(path)
        except OSError:
            pass

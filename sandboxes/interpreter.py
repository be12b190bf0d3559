"""A Python interpreter an unprivileged sandbox uid can execute.

A pyenv install under ``/root`` is not readable by the sandbox uid (bwrap: "Can't find
source path … Permission denied", ENVIRONMENTS.md §4.2). We look for a *world-readable*
interpreter (Debian's ``/usr/bin/python3`` first) and, for code that needs packages, build
a world-readable venv from it (``build_sandbox_venv``) that the sandbox binds read-only.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from dataclasses import dataclass

from agentrl_sandboxes.base import SandboxUnavailableError

CANDIDATES = ("/usr/bin/python3", "/usr/local/bin/python3", "/usr/bin/python3.11", "/usr/bin/python3.12")


@dataclass(frozen=True, slots=True)
class SandboxPython:
    """An interpreter usable inside the sandbox.

    Attributes:
        executable: absolute path of the interpreter (same path inside and outside).
        bind_dirs: host directories to bind read-only at the same path (empty when the
            interpreter lives under ``/usr``, which is always bound).
    """

    executable: str
    bind_dirs: tuple[str, ...] = ()


def world_accessible(path: str) -> bool:
    """True when every directory on the path is world-searchable and the file (after
    symlinks) is world-readable and executable."""
    real = os.path.realpath(path)
    if not os.path.isfile(real):
        return False
    mode = os.stat(real).st_mode
    if not (mode & stat.S_IROTH and mode & stat.S_IXOTH):
        return False
    parent = os.path.dirname(real)
    while parent != "/":
        if not os.stat(parent).st_mode & stat.S_IXOTH:
            return False
        parent = os.path.dirname(parent)
    return True


def _bind_dirs_for(executable: str) -> tuple[str, ...]:
    real = os.path.realpath(executable)
    dirs = []
    for path in (os.path.dirname(os.path.dirname(os.path.abspath(executable))), os.path.dirname(os.path.dirname(real))):
        if not path.startswith("/usr/") and path != "/usr" and path not in dirs:
            dirs.append(path)
    return tuple(dirs)


def find_python(explicit: str | None = None) -> SandboxPython:
    """The interpreter for sandboxed ``code=`` runs: ``explicit`` if given, else the first
    world-accessible entry of ``CANDIDATES``.

    Raises:
        SandboxUnavailableError: none is usable; the message says how to provide one.
    """
    for path in ([explicit] if explicit else CANDIDATES):
        if path and world_accessible(path):
            return SandboxPython(path, _bind_dirs_for(path))
    tried = explicit or ", ".join(CANDIDATES)
    raise SandboxUnavailableError(
        f"no Python interpreter readable by an unprivileged uid (tried {tried}). Install one with "
        "`apt-get install python3`, or build a world-readable venv with "
        "`python -m agentrl_sandboxes.interpreter /opt/agentrl-sandbox-venv [packages...]` and pass "
        "python='/opt/agentrl-sandbox-venv/bin/python'")


def build_sandbox_venv(dest: str, packages: list[str] | None = None, base_python: str = "/usr/bin/python3") -> str:
    """Create a world-readable venv at ``dest`` from ``base_python`` (itself world
    readable) and ``pip install`` ``packages`` into it with this interpreter's pip.

    Returns the venv's interpreter path. Raises ``SandboxUnavailableError`` when
    ``base_python`` is not world-accessible and ``subprocess.CalledProcessError`` when venv
    creation or pip fails.
    """
    if not world_accessible(base_python):
        raise SandboxUnavailableError(f"{base_python} is not world-readable; pick another base interpreter")
    subprocess.run([base_python, "-m", "venv", "--without-pip", dest], check=True)
    py = os.path.join(dest, "bin", "python")
    if packages:
        subprocess.run([sys.executable, "-m", "pip", "--python", py, "install", "-q", *packages], check=True)
    for root, dirnames, filenames in os.walk(dest):
        for name in dirnames + filenames:
            p = os.path.join(root, name)
            if not os.path.islink(p):
                mode = os.stat(p).st_mode
                os.chmod(p, mode | stat.S_IROTH | (stat.S_IXOTH if os.path.isdir(p) or mode & stat.S_IXUSR else 0))
    os.chmod(dest, 0o755)
    return py


if __name__ == "__main__":  # python -m agentrl_sandboxes.interpreter DEST [packages...]
    if len(sys.argv) < 2:
        sys.exit("usage: python -m agentrl_sandboxes.interpreter DEST [PACKAGE ...]")
    print(build_sandbox_venv(sys.argv[1], sys.argv[2:]))

"""agentrl_sandboxes (the ``sandboxes/`` folder) — isolated code execution (``Sandbox``
protocol, ``ExecResult``); imports nothing of agentrl.

Owns: the protocol and errors (``base``), backends ``bwrap`` (default local: bubblewrap as
an unprivileged per-slot uid, ENVIRONMENTS.md §4.2), ``docker`` (docker SDK, extra
``docker``) and ``unsafe_local`` (trusted code only), backend selection (``select``:
``make_sandbox("auto")``), execution slots (``slots``), optional cgroups (``cgroups``), a
world-readable interpreter (``interpreter``) and episode leases (``lease``, PITFALLS P8).
May import: the standard library (and the docker SDK lazily).

Example::

    from agentrl_sandboxes import make_sandbox
    sb = make_sandbox()                      # bwrap here; logs which backend and why
    r = sb.run(code="print(1 + 1)", timeout_s=5)
    assert r.stdout == "2\\n" and r.ok
"""

from agentrl_sandboxes.base import (
    ExecResult, Limits, Sandbox, SandboxBusyError, SandboxError, SandboxExpiredError, SandboxUnavailableError,
)
from agentrl_sandboxes.lease import SandboxLease
from agentrl_sandboxes.select import BACKENDS, Choice, make_sandbox, select_backend

__all__ = [
    "BACKENDS", "Choice", "ExecResult", "Limits", "Sandbox", "SandboxBusyError", "SandboxError",
    "SandboxExpiredError", "SandboxLease", "SandboxUnavailableError", "make_sandbox", "select_backend",
]

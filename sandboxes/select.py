"""Backend selection by name, with ``"auto"`` that says what it chose and why.

``auto`` tries bwrap, then Docker; it never falls back to an unisolated run: when neither
works it raises ``SandboxUnavailableError`` listing each backend's reason. ``unsafe_local``
is available only by its explicit name.
"""

from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass

from agentrl_sandboxes.base import Sandbox, SandboxUnavailableError

log = logging.getLogger("sandboxes")
BACKENDS = ("bwrap", "docker", "unsafe_local")


@dataclass(frozen=True, slots=True)
class Choice:
    """The backend ``auto`` picked (``name``) and a sentence saying why (``reason``)."""

    name: str
    reason: str


def _construct(name: str, **kwargs) -> Sandbox:
    if name == "bwrap":
        from agentrl_sandboxes.bwrap import BwrapSandbox

        return BwrapSandbox(**kwargs)
    if name == "docker":
        from agentrl_sandboxes.docker import DockerSandbox

        return DockerSandbox(**kwargs)
    if name == "unsafe_local":
        from agentrl_sandboxes.local import UnsafeLocalSandbox

        return UnsafeLocalSandbox(**kwargs)
    guess = difflib.get_close_matches(name, BACKENDS + ("auto",), n=1)
    hint = f"; did you mean {guess[0]!r}?" if guess else ""
    raise KeyError(f"unknown sandbox backend {name!r}{hint} Known: auto, {', '.join(BACKENDS)}")


def make_sandbox(backend: str = "auto", **kwargs) -> Sandbox:
    """A sandbox of the named backend; ``kwargs`` go to its constructor (e.g. ``slots=4``,
    ``limits=Limits(...)``). For ``"auto"`` the choice and reason are logged at INFO and
    stored on the returned object as ``chosen_because``.

    Raises:
        KeyError: unknown backend name (with the closest name).
        SandboxUnavailableError: the named backend (or, for ``auto``, every isolating
            backend) cannot run here; the message gives each reason and the fix.
    """
    if backend != "auto":
        return _construct(backend, **kwargs)
    sandbox, choice = _auto(**kwargs)
    log.info("sandbox backend %s: %s", choice.name, choice.reason)
    try:
        sandbox.chosen_because = choice.reason
    except AttributeError:  # pragma: no cover - slotted third-party backend
        pass
    return sandbox


def select_backend(**kwargs) -> Choice:
    """The backend ``make_sandbox("auto")`` would use here, and why (constructs and closes
    it to be sure it works)."""
    sandbox, choice = _auto(**kwargs)
    sandbox.close()
    return choice


def _auto(**kwargs) -> tuple[Sandbox, Choice]:
    reasons = []
    for name in ("bwrap", "docker"):
        try:
            sandbox = _construct(name, **kwargs)
        except (SandboxUnavailableError, TypeError) as exc:
            reasons.append(f"{name}: {exc}")
            continue
        why = "; ".join(reasons + [f"{name} works here (isolated: namespaces/container, rlimits)"])
        return sandbox, Choice(name, why)
    raise SandboxUnavailableError(
        "no isolating sandbox backend works here — " + " | ".join(reasons)
        + ". Install bubblewrap (apt-get install bubblewrap) or start a Docker daemon; for trusted code only, "
        "backend='unsafe_local' runs without isolation")

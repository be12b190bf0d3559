"""The bwrap sandbox the code-env tests grade in: one per test module, ``SANDBOX_SLOTS`` slots
(a module-level constant, default 1); skipped with the reason where bwrap cannot run."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def sandbox(request):
    from agentrl_sandboxes import SandboxUnavailableError
    from agentrl_sandboxes.bwrap import BwrapSandbox

    try:
        box = BwrapSandbox(slots=getattr(request.module, "SANDBOX_SLOTS", 1))
    except SandboxUnavailableError as exc:
        pytest.skip(f"bwrap backend unavailable here: {exc}")
    yield box
    box.close()

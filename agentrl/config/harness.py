"""The ``rollout.harness`` config section (``HarnessConfig``): an external agent program played
through the recording proxy (``agentrl.rollout.harness``).

Kept apart from ``agentrl.config.sections`` (which embeds it in ``RolloutConfig`` and re-exports
it) so each module stays one screenful of sections. Layer L0: standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from agentrl.config.errors import check as _check
from agentrl.config.errors import check_min as _check_min


@dataclass(frozen=True)
class HarnessConfig:
    """``rollout.harness``: play episodes with an external agent program through the recording
    proxy (``agentrl.rollout.harness``). ``command`` is its argv (``{python}`` = this
    interpreter); ``timeout_s`` the per-episode deadline in seconds; ``max_parallel`` harnesses
    run at once; ``mode`` the proxy's prompt continuation (tito | retokenize | strict).
    ``tool_schemas`` (tool name → JSON schema), ``force_tool_call`` and ``only_tools`` (a forced call
    may call only these of the offered tools, e.g. ``[act]`` where a framework also offers its own
    ``final_answer``): decoding constraints the proxy applies whatever the harness sends
    (``agentrl.proxy.forcing.server_constraints``).
    ``resends``: ``retry`` (an exact resend of the last call supersedes it) or ``new_call`` (for a
    stateless agent whose prompt can repeat on purpose; ``agentrl.proxy.retry``)."""

    command: tuple[str, ...]
    timeout_s: float = 300.0
    max_parallel: int = 8
    mode: Literal["tito", "retokenize", "strict"] = "tito"
    tool_schemas: Optional[dict] = None
    force_tool_call: bool = False
    only_tools: Optional[tuple[str, ...]] = None
    resends: Literal["retry", "new_call"] = "retry"

    def __post_init__(self) -> None:
        _check(len(self.command) > 0, "rollout.harness.command must name a program, e.g. ['{python}', 'agent.py']")
        _check_min("rollout.harness.timeout_s", self.timeout_s, 0, "seconds", strict=True)
        _check_min("rollout.harness.max_parallel", self.max_parallel, 1)
        _check(self.only_tools is None or (len(self.only_tools) > 0 and all(isinstance(n, str) and n
                                                                             for n in self.only_tools)),
               "rollout.harness.only_tools lists tool names, e.g. [act]; leave it out to allow every offered tool")
        _check(all(isinstance(v, dict) for v in (self.tool_schemas or {}).values()),
               "rollout.harness.tool_schemas maps a tool name to a JSON schema object, e.g. {act: {type: object, ...}}")

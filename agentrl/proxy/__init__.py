"""agentrl.proxy — the recording OpenAI-compatible proxy for external harnesses (layer L2).

Owns: the refusals (``errors``: ``WireError``, at the bottom), the OpenAI wire format (``wire``), forced
tools and JSON output as grammars (``forcing``), the Responses and Anthropic Messages dialects
(``responses``, ``anthropic``), ``stop`` strings (``stops``), message/tool-call conversion (``messages``),
token-in/token-out continuation and drift (``tito``), the batching engine worker and
pause gate (``engine``), episode sessions (``sessions``), one call → one ``Turn``
(``calls``), response bodies and SSE (``sse``), the ASGI routes (``app``) and the
trainer-side ``RecordingProxy`` (``server``). MODELS.md §5.

May import ``agentrl.llm``, ``agentrl.env`` and ``agentrl.types`` (plus fastapi/starlette,
uvicorn, orjson); never ``agentrl.store`` (closed episodes go to any ``EpisodeSink``, e.g.
a ``TurnStore`` passed in by the CLI or the trainer), never torch. Heavy web imports happen
only in ``app``/``server.start``.
"""

from agentrl.proxy.server import RecordingProxy
from agentrl.proxy.sessions import EpisodeHandle, EpisodeSink, EpisodeSummary
from agentrl.proxy.errors import WireError

__all__ = ["EpisodeHandle", "EpisodeSink", "EpisodeSummary", "RecordingProxy", "WireError"]

"""Limits every HTTP server of the project sets on its clients (issue 52): a request body cap, a
deadline to finish a request's headers, and a connection cap — so an unauthenticated slow or
oversized client cannot starve the token holders of ``agentrl envs serve`` or the LLM proxy.

- **Body**: ``BodyLimit`` (ASGI middleware; ``limit_body`` adds it) answers 413 to a ``Content-Length`` over the cap and
  stops a streamed body once it passes it; the app never sees the rest.
- **Headers**: uvicorn times out idle keep-alive connections but not a client that never
  completes its headers (a slow-loris: one byte every few seconds). ``header_deadline_protocol``
  gives uvicorn an ``h11`` protocol class that closes a connection that has not completed a
  request's headers within ``header_timeout_s`` of connecting or of its previous response
  (a WebSocket, once upgraded, is no longer watched).
- **Connections**: uvicorn's ``limit_concurrency``: past it a new request is answered 503.

Layer L0: the standard library; uvicorn and h11 are imported when the server is built.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = ["ServeLimits", "BodyLimit", "limit_body", "header_deadline_protocol", "uvicorn_limits"]


@dataclass(frozen=True)
class ServeLimits:
    """``max_body_bytes``: the largest request body (bytes; 413 above it).
    ``header_timeout_s``: seconds a connection has to complete a request's headers.
    ``max_connections``: connections and requests served at once (503 above it; None: no cap).

    Raises:
        ValueError: a limit that is not positive (names the field).
    """

    max_body_bytes: int = 64 << 20
    header_timeout_s: float = 10.0
    max_connections: int | None = 256

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "header_timeout_s", "max_connections"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"ServeLimits.{name} must be > 0, got {value!r}")


async def _reply(send, status: int, message: str) -> None:
    body = json.dumps({"error": {"message": message, "type": "request_too_large"}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass


class BodyLimit:
    """ASGI middleware: a request-body cap of ``max_bytes`` bytes (HTTP only; WebSocket messages
    are capped by uvicorn's ``ws_max_size``). A larger ``Content-Length`` is answered 413 at once;
    a chunked body that grows past the cap is answered 413 when it does (if the app has not
    started its response). Add it with ``app.add_middleware(BodyLimit, max_bytes=N)`` (the app
    keeps its ``state``) or wrap any ASGI app: ``limit_body(app, N)``."""

    def __init__(self, app, max_bytes: int) -> None:
        self.app, self.max_bytes = app, int(max_bytes)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length")
        too_big = f"request body over {self.max_bytes} bytes; send a smaller request"
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            return await _reply(send, 413, too_big)
        seen, started = 0, False

        async def counted():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge()
            return message

        async def watched(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except _TooLarge:
            if not started:
                await _reply(send, 413, too_big)


def limit_body(app, max_bytes: int):
    """``app`` with ``BodyLimit(max_bytes)`` in front: added as middleware when the app takes
    middleware (Starlette/FastAPI: its ``state`` stays reachable), else wrapped."""
    if hasattr(app, "add_middleware"):
        app.add_middleware(BodyLimit, max_bytes=max_bytes)
        return app
    return BodyLimit(app, max_bytes)


def header_deadline_protocol(header_timeout_s: float):
    """uvicorn's ``h11`` protocol class with a header deadline (see the module docstring)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderDeadlineProtocol(H11Protocol):
        _deadline = None

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(header_timeout_s, self._expire)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expire(self) -> None:
            self._deadline = None
            if self.transport.get_protocol() is not self or self.transport.is_closing():
                return  # upgraded to a WebSocket, or already going
            if self.conn.their_state is h11.IDLE:
                self.transport.close()  # no request's headers complete since the deadline was set

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def handle_events(self) -> None:
            before = self.cycle
            super().handle_events()
            if self.cycle is not before or self.transport.get_protocol() is not self:
                self._disarm()  # a request's headers arrived (or the connection became a WebSocket)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderDeadlineProtocol


def uvicorn_limits(limits: ServeLimits) -> dict:
    """Keyword arguments of ``uvicorn.Config`` for ``limits``: the header-deadline protocol and
    the connection cap (wrap the app in ``limit_body`` for the body cap)."""
    return {"http": header_deadline_protocol(limits.header_timeout_s), "limit_concurrency": limits.max_connections}

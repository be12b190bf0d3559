"""``TokenGate``: an ASGI middleware that admits only requests carrying the server's token.

Protocols like OpenEnv have no authentication; ``agentrl envs serve --token`` adds this gate
for a server reachable beyond loopback. HTTP requests without the token get 401, WebSocket
handshakes are refused (403). ``GET /health`` stays open for liveness probes. The token is
compared in constant time.
"""

from __future__ import annotations

import hmac
import json

OPEN_PATHS = ("/health",)
HEADER = "x-agentrl-token"


def _presented(headers: list[tuple[bytes, bytes]]) -> str:
    for key, value in headers:
        k = key.decode("latin-1").lower()
        if k == "authorization":
            v = value.decode("latin-1")
            if v.lower().startswith("bearer "):
                return v[7:].strip()
        elif k == HEADER:
            return value.decode("latin-1").strip()
    return ""


class TokenGate:
    """ASGI middleware: ``Authorization: Bearer <token>`` or ``X-Agentrl-Token: <token>``.

    Args:
        app: the wrapped ASGI app.
        token: the shared secret (non-empty).
    Raises:
        ValueError: an empty token.
    """

    def __init__(self, app, token: str) -> None:
        if not token:
            raise ValueError("the server token is empty; pass a non-empty --token or none at all")
        self.app, self._token = app, token.encode()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket") or scope.get("path") in OPEN_PATHS:
            return await self.app(scope, receive, send)
        if hmac.compare_digest(_presented(scope.get("headers") or []).encode(), self._token):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": "missing or wrong token"})
            return
        await json_reply(send, 401, "missing or wrong token: send Authorization: Bearer <token>")


async def json_reply(send, status: int, detail: str) -> None:
    """Answer an ASGI HTTP request with ``status`` and ``{"detail": detail}``."""
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})

"""The proxy's refusals: ``WireError`` (an HTTP status and an OpenAI-style error body) and
``bad`` (a 400 ``invalid_request_error``).

The bottom of the proxy room: every module that refuses a request (``wire``, ``forcing``,
the dialects, ``sessions``, ``app``) imports its error from here, and this module imports
nothing of ours.
"""

from __future__ import annotations

import orjson

__all__ = ["WireError", "bad"]


class WireError(Exception):
    """A request the proxy refuses; ``status`` is the HTTP code (400, 401, 404, 409, 429, 503).

    Args:
        status: HTTP status code.
        message: what is wrong and how to fix it.
        param: the offending request parameter, if any.
        kind: OpenAI error ``type`` (``invalid_request_error``, ``authentication_error`` ...).
        retry_after_s: seconds sent as ``Retry-After`` (a 429 while the weights are updated).
    """

    def __init__(self, status: int, message: str, *, param: str | None = None, kind: str = "invalid_request_error",
                 retry_after_s: float | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str]:
        """HTTP headers of the error reply (``Retry-After`` in whole seconds, at least 1)."""
        if self.retry_after_s is None:
            return {}
        return {"Retry-After": str(max(1, int(-(-self.retry_after_s // 1))))}

    def body(self) -> bytes:
        """The OpenAI-style JSON error body."""
        return orjson.dumps({"error": {"message": self.message, "type": self.kind, "param": self.param,
                                       "code": self.status}})


def bad(message: str, param: str | None = None) -> WireError:
    """A 400 ``invalid_request_error``."""
    return WireError(400, message, param=param)

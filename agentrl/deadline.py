"""Total deadlines for blocking calls such as HTTP requests (L0: standard library only).

httpx's timeouts bound each network operation — connecting, one read, one write, waiting for
a pooled connection — not the request: a server that sends one byte every 2 s never trips a
5 s read timeout, so a probe or an env step can hang for as long as the server likes.
``call_with_deadline`` bounds the whole call: it runs it in a daemon thread and, when the
deadline passes first, calls ``abandon`` (close the client: the stuck read fails at the
server's next byte, so the thread ends too) and raises ``DeadlineExceeded``. Used by the
remote-env probe and clients (``agentrl_envs.remote``) and ``agentrl.llm.openai_http``;
OpenEnv's WebSocket client already bounds each message (``asyncio.wait_for``). The total
deadline is the configured timeout itself (``request_timeout_s``, ``connect_timeout_s``,
``timeout_s``): a request whose connect and read each stayed under it but together passed it
now fails, as those settings' docs say ("waits at most").
"""

from __future__ import annotations

import threading
from typing import Callable, TypeVar

T = TypeVar("T")


class DeadlineExceeded(TimeoutError):
    """A call had no complete answer within its total deadline."""


def call_with_deadline(fn: Callable[[], T], deadline_s: float, *, what: str,
                       abandon: Callable[[], object] | None = None) -> T:
    """``fn()``'s value (or its exception) if it returns within ``deadline_s`` seconds.

    Args:
        fn: the blocking call; it must finish its work before returning (read the whole body).
        deadline_s: the total deadline, seconds (> 0).
        what: names the call in the error (e.g. ``"GET http://host/metadata"``).
        abandon: called once when the deadline passes (close the client or connection ``fn``
            uses); its own exceptions are ignored.
    Raises:
        DeadlineExceeded: no answer within ``deadline_s``.
        ValueError: ``deadline_s`` <= 0.
        Whatever ``fn`` raised, unchanged.
    """
    if not deadline_s > 0:
        raise ValueError(f"deadline_s must be > 0 seconds, got {deadline_s}")
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True, name="agentrl-deadline")
    thread.start()
    thread.join(deadline_s)
    if thread.is_alive():
        if abandon is not None:
            try:
                abandon()
            except Exception:
                pass
        raise DeadlineExceeded(f"{what}: no complete answer within {deadline_s:g} s (a total deadline: the server "
                               f"is down, stuck, or sending its answer too slowly)")
    if "error" in box:
        raise box["error"]
    return box["value"]

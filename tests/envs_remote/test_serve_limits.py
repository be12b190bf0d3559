"""Issue 52's HTTP risks on ``agentrl envs serve``: a slow-loris cannot hold a connection past the
header deadline, an oversized body is answered 413 before the app reads it, the connection cap
answers 503 and frees up as the deadline closes the stalled connections — while a WebSocket
session that idles past the deadline plays on."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlparse

import httpx
import pytest
from servers import cli_server

from agentrl.serve_limits import ServeLimits


def _stalled(url: str) -> socket.socket:
    """A connection that starts a request and never finishes its headers."""
    u = urlparse(url)
    s = socket.create_connection((u.hostname, u.port), timeout=10)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    return s


def _closed_by_server(s: socket.socket, within_s: float) -> bool:
    s.settimeout(within_s)
    try:
        return s.recv(1) == b""
    except socket.timeout:
        return False


def test_limits_are_checked():
    assert ServeLimits().max_body_bytes == 64 << 20
    with pytest.raises(ValueError, match="ServeLimits.header_timeout_s must be > 0"):
        ServeLimits(header_timeout_s=0)


def test_envs_serve_header_deadline_body_cap_and_connection_cap():
    from agentrl.env import make

    args = ("--slots", "2", "--header-timeout", "1", "--max-body-bytes", "4096", "--max-connections", "6")
    with cli_server("agentrl/Toy-v0", *args) as (_, url):
        env = make("agentrl/Remote-v0", base_url=url)  # a WebSocket session, idle longer than the deadline below
        env.reset(seed=0)
        slow = _stalled(url)
        t0 = time.monotonic()
        assert _closed_by_server(slow, within_s=5.0)  # before: held open for good
        assert 0.8 < time.monotonic() - t0 < 4.0
        big = httpx.post(f"{url}/reset", content=b"{" + b" " * 10_000 + b"}",
                         headers={"Content-Type": "application/json"}, timeout=10)
        assert big.status_code == 413 and "over 4096 bytes" in big.json()["error"]["message"]
        stalled = [_stalled(url) for _ in range(6)]
        time.sleep(0.2)
        assert httpx.get(f"{url}/health", timeout=10).status_code == 503  # the cap is reached
        assert all(_closed_by_server(s, within_s=5.0) for s in stalled)  # the deadline frees them
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200
        obs, reward, *_ = env.step("look")  # the WebSocket outlived several deadlines
        assert isinstance(obs, str) and obs
        env.close()
        for s in [slow, *stalled]:
            s.close()

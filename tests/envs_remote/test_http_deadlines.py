"""A server that answers one byte at a time (issue 52, defect 5): httpx's timeouts are per
read, so before this a byte every 0.3 s never tripped them — the ``/metadata`` probe hung
``agentrl train``'s config check and a NeMo-Gym ``/step`` ran past ``request_timeout_s``. Every
request now has a total deadline (``agentrl.deadline``): the probe, the NeMo-Gym step, the
OpenAI-compatible engine."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest

from agentrl.deadline import DeadlineExceeded, call_with_deadline
from agentrl.env import make

#: seconds between two bytes of a trickled answer (far below every per-read timeout used here)
GAP_S = 0.3
ROWS = [{"task_id": "t0", "responses_create_params": {"input": [{"role": "user", "content": "Say go."}]}}]


def _answer(body: bytes) -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


def _read_request(conn: socket.socket) -> str:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return ""
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0)
    while len(rest) < length:
        rest += conn.recv(65536)
    return head.split(b" ")[1].decode()


@contextlib.contextmanager
def trickle_server(slow_paths: tuple[str, ...]):
    """An HTTP server on 127.0.0.1: paths in ``slow_paths`` answer one byte every ``GAP_S``
    (never finishing within a test), the others answer at once (NeMo-Gym's ``/`` and ``/reset``)."""
    sock = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    quick = {"/": b"{}", "/reset": b'{"observation": "Say go.", "info": {}}', "/close": b"{}"}

    def serve(conn: socket.socket) -> None:
        with conn:
            path = _read_request(conn)
            answer = _answer(quick.get(path, b"{}"))
            if path not in slow_paths:
                conn.sendall(answer)
                return
            for i in range(len(answer)):
                if stop.is_set():
                    return
                try:
                    conn.sendall(answer[i:i + 1])
                except OSError:
                    return
                time.sleep(GAP_S)

    def accept() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(2)
        sock.close()


def test_call_with_deadline():
    assert call_with_deadline(lambda: 7, 1.0, what="x") == 7
    with pytest.raises(KeyError, match="inner"):
        call_with_deadline(lambda: {}["inner"], 1.0, what="x")
    abandoned = []
    t0 = time.monotonic()
    with pytest.raises(DeadlineExceeded, match=r"sleepy: no complete answer within 0.2 s"):
        call_with_deadline(lambda: time.sleep(5), 0.2, what="sleepy", abandon=lambda: abandoned.append(1))
    assert abandoned == [1] and time.monotonic() - t0 < 1.0
    with pytest.raises(ValueError, match="deadline_s must be > 0"):
        call_with_deadline(lambda: 1, 0, what="x")


def test_the_metadata_probe_ends_within_its_deadline():
    from agentrl_envs.remote.wire import RemoteEnvError

    with trickle_server(("/metadata",)) as url:
        t0 = time.monotonic()
        with pytest.raises(RemoteEnvError, match=r"no answer from .*/metadata within 1s"):
            make("agentrl/Remote-v0", base_url=url, connect_timeout_s=1.0)
        assert time.monotonic() - t0 < 3.0  # 1 s deadline (+ start-up); the trickle would take ~30 s


def test_a_nemo_gym_step_ends_within_request_timeout():
    with trickle_server(("/step",)) as url:
        env = make("agentrl/Remote-v0", base_url=url, protocol="nemo-gym", tasks=ROWS, request_timeout_s=1.0)
        env.reset(seed=0)
        t0 = time.monotonic()
        obs, reward, term, trunc, info = env.step("go")
        waited = time.monotonic() - t0
        env.close()
    assert waited < 3.0 and term and reward == 0.0 and obs == ""
    assert "no answer within 1s" in info["env_error"]


def test_the_openai_engine_ends_within_its_timeout():
    from agentrl.llm.openai_http import OpenAIHTTPEngine

    with trickle_server(("/v1/completions",)) as url:
        engine = OpenAIHTTPEngine(url, "m", eos_token_id=0, max_context=64, timeout_s=1.0, retries=0)
        first = engine.client
        t0 = time.monotonic()
        with pytest.raises(DeadlineExceeded, match="POST /v1/completions: no complete answer within 1 s"):
            engine._post("/v1/completions", json={"prompt": [[1]]})
        assert time.monotonic() - t0 < 3.0
        assert engine.client is not first and not engine.client.is_closed  # later calls get a fresh client
        engine.close()


def test_a_call_on_a_client_replaced_meanwhile_is_retried_on_the_fresh_one():
    import httpx

    from agentrl.llm.openai_http import OpenAIHTTPEngine, TransientHTTPError

    calls = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        return httpx.Response(200, json={"ok": True})

    engine = OpenAIHTTPEngine("http://standin", "m", eos_token_id=0, max_context=64, timeout_s=5.0, retries=1,
                              backoff_s=0.0, transport=httpx.MockTransport(answer))
    old = engine.client
    engine._replace_client(old)  # another caller's deadline passed on it
    engine._replace_client(old)  # a second one: still one fresh client
    assert old.is_closed and engine.client is not old and not engine.client.is_closed
    with pytest.raises(TransientHTTPError, match="replaced after another call's deadline"):
        engine._send(old, "/x", None, None)
    assert engine._post("/x") == {"ok": True} and calls == ["/x"]
    engine.close()

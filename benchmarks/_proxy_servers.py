"""Server side of ``benchmarks/proxy.py``: the servers it measures, each in a child process.

- ``tiny_renderer`` / ``scripted_engine``: the tiny ChatML renderer and a ``ScriptedEngine``
  answering every call with the same 8 ids (microseconds per call).
- ``serve_proxy``: a ``RecordingProxy`` on that engine (optionally from another source tree).
- ``serve_direct``: the same engine behind the thinnest OpenAI-compatible chat server.
- ``Server``: starts one of these in a ``spawn`` child process and reads back its URL and the
  CPU seconds it used between ``mark()`` and ``stop()``.

Process targets live here, at module level, so the spawned child can import them by name
(``benchmarks/`` is on the parent's ``sys.path`` when ``proxy.py`` runs as a script, and
``spawn`` hands the parent's ``sys.path`` to the child).
"""

from __future__ import annotations

import multiprocessing as mp
import tempfile
import time
from pathlib import Path

REPLY = "go east"  # the scripted engine's reply is built from this text


def tiny_renderer():
    """The ``ChatRenderer`` of the tiny ChatML tokenizer (MODELS.md §2.1), built once under the
    system temp folder (``agentrl-test-cache``) and reused from there."""
    from transformers import AutoTokenizer

    from agentrl.llm.chat import ChatRenderer
    from agentrl.llm.tiny import tiny_model_dir

    return ChatRenderer(AutoTokenizer.from_pretrained(tiny_model_dir(Path(tempfile.gettempdir()) / "agentrl-test-cache")))


def scripted_engine(renderer):
    """A ``ScriptedEngine`` answering every call with the same 8 token ids (7 ids of ``REPLY``
    text, then EOS of ``renderer``), with a context limit large enough never to truncate."""
    from agentrl.llm.scripted import ScriptedEngine

    ids = renderer.encode(" ".join([REPLY] * 4)).tolist()[:7] + [renderer.eos_token_id]
    return ScriptedEngine([ids], eos_token_id=renderer.eos_token_id, max_context=1 << 20)


def _cpu_between_messages(conn) -> None:
    """Wait for "mark", then for "stop"; send the CPU seconds of this process in between."""
    conn.recv()
    c0 = time.process_time()
    conn.recv()
    conn.send(time.process_time() - c0)


def serve_proxy(conn, measure_drift: bool, src: str | None = None) -> None:
    """Child process: serve a proxy until the parent stops it (``src``: import ``agentrl``
    from this source tree instead).

    Sends the proxy's base URL (admin token ``bench``) on ``conn``, then follows the
    ``_cpu_between_messages`` protocol."""
    if src:
        import sys

        sys.path.insert(0, src)
    from agentrl.proxy import RecordingProxy

    r = tiny_renderer()
    proxy = RecordingProxy(scripted_engine(r), r, admin_token="bench", measure_drift=measure_drift, max_batch=32)
    conn.send(proxy.start())
    _cpu_between_messages(conn)
    proxy.stop()


def serve_direct(conn, hop: bool) -> None:
    """Child process: the engine behind the thinnest OpenAI-compatible chat server (``hop``:
    the engine runs in the default thread pool, else on the event loop).

    Routes: ``POST /v1/chat/completions`` (render, engine, reply) and
    ``POST /echo/v1/chat/completions`` (a canned reply: the HTTP + JSON floor). Sends the
    server's ``http://127.0.0.1:PORT`` on ``conn``, then follows ``_cpu_between_messages``."""
    import asyncio
    import socket
    import threading

    import orjson
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import Response

    from agentrl.llm.base import SamplingParams
    from agentrl.types import Message

    r = tiny_renderer()
    engine = scripted_engine(r)

    async def chat(request):
        data = orjson.loads(await request.body())
        prompt = r.render_ids([Message(m["role"], m.get("content") or "") for m in data["messages"]])
        sp = SamplingParams(max_tokens=int(data.get("max_tokens") or 256))
        if hop:
            out = (await asyncio.get_running_loop().run_in_executor(None, engine.generate, [prompt], sp))[0]
        else:
            out = engine.generate([prompt], sp)[0]
        n_p, n_c = int(prompt.size), int(out.token_ids.size)
        body = {"id": "chatcmpl-direct", "object": "chat.completion", "created": int(time.time()),
                "model": data.get("model", "policy"), "usage": {"prompt_tokens": n_p, "completion_tokens": n_c,
                                                                "total_tokens": n_p + n_c},
                "choices": [{"index": 0, "message": {"role": "assistant", "content": r.completion_text(out.token_ids)},
                             "finish_reason": "stop", "logprobs": None}]}
        return Response(orjson.dumps(body), media_type="application/json")

    async def echo(request):  # the HTTP + JSON floor: parse the request, answer a canned reply
        data = orjson.loads(await request.body())
        return Response(orjson.dumps({**canned, "model": data.get("model", "policy"), "created": int(time.time())}),
                        media_type="application/json")

    canned = {"id": "chatcmpl-echo", "object": "chat.completion", "usage": {"prompt_tokens": 0, "completion_tokens": 8,
                                                                            "total_tokens": 8},
              "choices": [{"index": 0, "message": {"role": "assistant", "content": " ".join([REPLY] * 2)},
                           "finish_reason": "stop", "logprobs": None}]}
    app = Starlette()
    app.add_route("/v1/chat/completions", chat, methods=["POST"])
    app.add_route("/echo/v1/chat/completions", echo, methods=["POST"])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    conn.send(f"http://127.0.0.1:{sock.getsockname()[1]}")
    _cpu_between_messages(conn)
    server.should_exit = True


class Server:
    """A server child process: ``url`` once started; ``stop()`` returns its CPU seconds
    since ``mark()`` (0.0 when never marked)."""

    def __init__(self, target, *args) -> None:
        """Start ``target(conn, *args)`` in a ``spawn`` child (``target``: a module-level
        function of this module, e.g. ``serve_proxy``) and wait for the URL it sends."""
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=target, args=(child, *args), daemon=True)
        self._proc.start()
        self.url = self._conn.recv()
        self._marked = False

    def mark(self) -> None:
        """Start counting the child's CPU time (call at most once)."""
        self._conn.send("mark")
        self._marked = True

    def stop(self) -> float:
        """Stop the server and join the child (up to 30 s); return its CPU seconds since
        ``mark()``, 0.0 when never marked."""
        marked = self._marked
        if not marked:
            self.mark()
        self._conn.send("stop")
        cpu = self._conn.recv()
        self._proc.join(30)
        return cpu if marked else 0.0


"""Servers for the env-hub tests, all on 127.0.0.1 with a free port and cleaned up:

- ``cli_server``: ``agentrl envs serve`` as a subprocess (killable mid-episode);
- ``thread_server``: any ASGI app under uvicorn in a thread of this process;
- ``nemo_gym_standin``: a NeMo-Gym ``GymnasiumServer`` stand-in written from the protocol's
  documentation (shared/docs/ENV_PROTOCOLS.md §1.3): ``GET /``, ``POST /reset``, ``/step``,
  ``/close``; the session is a cookie (a plain uuid here; NeMo-Gym signs it with a public
  key, which a client never reads); the action is read from ``response.output[*]`` message
  items of type ``output_text``. It serves an agentrl env in-process, one per session.
- ``SlowEnv``: ``agentrl-test/Slow-v0``, Toy whose step sleeps ``delay_s``.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
import time
import uuid

import gymnasium
from fastapi import FastAPI, Request, Response

from agentrl_envs.toy.env import ToyEnv


class SlowEnv(ToyEnv):
    """Toy whose every step first sleeps ``delay_s`` seconds."""

    def __init__(self, delay_s: float = 3.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.delay_s = delay_s

    def step(self, action):
        time.sleep(self.delay_s)
        return super().step(action)


if "agentrl-test/Slow-v0" not in gymnasium.registry:
    gymnasium.register(id="agentrl-test/Slow-v0", entry_point="servers:SlowEnv")


@contextlib.contextmanager
def cli_server(env_id: str, *args: str, timeout_s: float = 120.0):
    """``agentrl envs serve env_id --port 0 *args`` in a subprocess; yields ``(proc, url)``."""
    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost"}
    proc = subprocess.Popen([sys.executable, "-m", "agentrl", "envs", "serve", env_id, "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        deadline, url, seen = time.monotonic() + timeout_s, None, []
        while url is None:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the server exited ({proc.wait()}): {''.join(seen)[-2000:]}")
            seen.append(line)
            m = re.search(r" at (http://\S+)", line)
            url = m.group(1) if m else None
            if time.monotonic() > deadline:
                raise TimeoutError(f"no server within {timeout_s}s: {''.join(seen)[-2000:]}")
        threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep draining its output
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


@contextlib.contextmanager
def thread_server(app):
    """``app`` under uvicorn on 127.0.0.1:free port in a daemon thread; yields the URL."""
    import uvicorn

    from agentrl.envserve.runner import bind

    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.02)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@contextlib.contextmanager
def openenv_thread_server(env_id: str, slots: int = 2, token: str | None = None, **hub_kwargs):
    """``env_id`` served over OpenEnv (PoolHub + OpenEnv's app) in this process; yields the URL."""
    from agentrl.envserve.dispatch import PoolHub
    from agentrl.envserve.openenv_app import build_openenv_app

    hub = PoolHub(env_id, slots, num_workers=1, **hub_kwargs)
    try:
        with thread_server(build_openenv_app(hub, token=token)) as url:
            yield url
    finally:
        hub.close()


def _action_text(response: dict) -> str:
    """The text of the ``output_text`` parts of the message items of a Responses object."""
    return "".join(part.get("text", "") for item in response.get("output", []) if item.get("type") == "message"
                   for part in item.get("content", []) if part.get("type") == "output_text")


def nemo_gym_standin(env_id: str = "agentrl/Toy-v0", explicit_close: bool = True):
    """A FastAPI app speaking NeMo-Gym's GymnasiumServer wire around ``env_id``; its
    ``app.state.closed`` counts explicit closes and ``app.state.sessions`` the live ones."""
    from agentrl.env import make
    from agentrl.envserve.openenv_app import jsonable

    app = FastAPI()
    app.state.sessions, app.state.closed, app.state.rows = {}, 0, []
    cookie = "StandinGymnasiumServer___standin"

    @app.get("/")
    def alive() -> dict:
        return {}

    @app.post("/reset")
    async def reset(request: Request, response: Response) -> dict:
        body = await request.json()
        app.state.rows.append(body)
        sid = request.cookies.get(cookie) or uuid.uuid4().hex
        response.set_cookie(cookie, sid)
        env = app.state.sessions.get(sid) or make(env_id)
        app.state.sessions[sid] = env
        obs, info = env.reset(seed=int(body.get("seed", 0)))
        info = {**jsonable(info), "supports_explicit_close": explicit_close}
        return {"observation": obs, "info": info}

    @app.post("/step")
    async def step(request: Request) -> dict:
        body = await request.json()
        env = app.state.sessions.get(request.cookies.get(cookie, ""))
        if env is None:
            return Response(status_code=400, content="no session: call /reset first")
        obs, reward, term, trunc, info = env.step(_action_text(body["response"]))
        return {"observation": obs, "reward": reward, "terminated": term, "truncated": trunc, "info": jsonable(info)}

    @app.post("/close")
    async def close(request: Request) -> dict:
        env = app.state.sessions.pop(request.cookies.get(cookie, ""), None)
        if env is not None:
            env.close()
            app.state.closed += 1
        return {}

    return app

"""``RecordingProxy``: the trainer-side Python API and the uvicorn server thread.

    proxy = RecordingProxy(engine, renderer, sink=store, run_id="harness-run")
    with proxy.serve():                      # uvicorn on 127.0.0.1, a free port
        h = proxy.create_episode(env_id="agentrl/Toy-v0", seed=3)
        ...  # a harness calls h.base_url with any OpenAI client
        proxy.set_reward(h.episode_id, 1.0)  # per episode, or turn=t per turn
        episode = proxy.close_episode(h.episode_id)
        proxy.update_weights(path, version=1)   # holds new calls, waits for the ones in flight
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import threading
import time
from typing import Callable, Iterator

from agentrl.llm.base import LLMClient, SamplingParams
from agentrl.llm.chat import ChatRenderer
from agentrl.proxy.calls import ProxyCore
from agentrl.proxy.sessions import EpisodeHandle, EpisodeSink, EpisodeSummary, SessionRegistry
from agentrl.serve_limits import ServeLimits, limit_body, uvicorn_limits
from agentrl.types import Episode, EpisodeStatus


class RecordingProxy:
    """Record every call of external harnesses as token-faithful turns.

    Args:
        engine: the policy engine (``LLMClient``).
        renderer: the policy's ``ChatRenderer`` (chat template, tokenizer).
        sink: receives closed episodes (e.g. ``agentrl.store.TurnStore``); None keeps them
            with the caller of ``close_episode`` only.
        run_id: stamped on episodes and turns.
        mode: ``tito`` (default) | ``retokenize`` | ``strict`` (``agentrl.proxy.tito``).
        sampling: defaults for sampling parameters a request leaves out.
        admin_token: bearer token of the ``/admin`` routes (random when None).
        measure_drift: compute ``token_prefix_ok`` on continued calls.
        max_batch: most prompts per engine call; model_name: served on ``GET models``.
        first_episode_id: id of the first episode created without an explicit id.
        unknown_fields: ``ignore`` | ``refuse`` unknown request keys (None: ``refuse`` in
            ``strict`` mode, else ``ignore``; see ``ProxyCore``).
        limits: the HTTP server's body cap, header deadline and connection cap
            (``agentrl.serve_limits``; None: its defaults).
        while_paused: ``hold`` (default) | ``reject`` — a call that arrives while the weights
            are updated waits, or gets 429 with ``Retry-After: retry_after_s`` (OpenAI SDKs
            retry it); either way no call is served from half-loaded or changing weights.
        tool_schemas: tool name → JSON schema its forced calls' arguments are decoded under,
            instead of the harness's; force_tools: every request that offers tools and forces
            nothing must call one; only_tools: a forced call may call only these of the offered
            tools (``agentrl.proxy.forcing.server_constraints``).
        resends: ``retry`` | ``new_call`` — whether an exact resend of an episode's last call
            supersedes it (``ProxyCore``).
    """

    def __init__(self, engine: LLMClient, renderer: ChatRenderer, *, sink: EpisodeSink | None = None,
                 run_id: str = "proxy", mode: str = "tito", sampling: SamplingParams | None = None,
                 admin_token: str | None = None, measure_drift: bool = True, max_batch: int = 32,
                 model_name: str = "policy", first_episode_id: int = 0, unknown_fields: str | None = None,
                 limits: ServeLimits | None = None, while_paused: str = "hold", retry_after_s: float = 1.0,
                 tool_schemas: dict | None = None, force_tools: bool = False, resends: str = "retry",
                 only_tools: tuple[str, ...] | None = None) -> None:
        self.limits = limits or ServeLimits()
        self.registry = SessionRegistry(run_id, sink, first_episode_id)
        self.core = ProxyCore(engine, renderer, self.registry, mode=mode, sampling=sampling,
                              measure_drift=measure_drift, max_batch=max_batch, model_name=model_name,
                              unknown_fields=unknown_fields, while_paused=while_paused, retry_after_s=retry_after_s,
                              tool_schemas=tool_schemas, force_tools=force_tools, resends=resends,
                              only_tools=only_tools)
        self.admin_token = admin_token or secrets.token_hex(16)
        self.url = ""  # "http://host:port" once serving
        self._server = None
        self._thread: threading.Thread | None = None

    @property
    def engine(self) -> LLMClient:
        return self.core.engine

    # -- serving ---------------------------------------------------------------------------
    def app(self):
        """The ASGI app (for mounting elsewhere or testing)."""
        from agentrl.proxy.app import build_app

        return limit_body(build_app(self.core, admin_token=self.admin_token, base_url=lambda: self.url),
                          self.limits.max_body_bytes)

    def start(self, host: str = "127.0.0.1", port: int = 0, *, log_level: str = "warning",
              timeout_s: float = 30.0) -> str:
        """Serve in a background thread; returns the root URL ``http://host:port``.

        Raises:
            OSError: the port cannot be bound. RuntimeError: already serving, or the server
                did not start within ``timeout_s`` seconds.
        """
        import uvicorn

        if self._thread is not None:
            raise RuntimeError(f"the proxy is already serving at {self.url}")
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        config = uvicorn.Config(self.app(), log_level=log_level, access_log=False, lifespan="off",
                                timeout_keep_alive=60, **uvicorn_limits(self.limits))
        self._server = uvicorn.Server(config)
        self.url = f"http://{host}:{sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name="agentrl-proxy-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the proxy server did not start on {self.url}")
            time.sleep(0.01)
        return self.url

    def stop(self) -> None:
        """Stop the server (idempotent) and the engine worker."""
        self.core.gate.resume()  # calls held by a pause must not block the shutdown
        if self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
            self._server.config.app.state.pool.shutdown(wait=False, cancel_futures=True)
            self._thread = self._server = None
        self.core.close()

    @contextlib.contextmanager
    def serve(self, host: str = "127.0.0.1", port: int = 0) -> Iterator["RecordingProxy"]:
        """``start`` … ``stop`` as a context manager."""
        self.start(host, port)
        try:
            yield self
        finally:
            self.stop()

    # -- episodes ----------------------------------------------------------------------------
    def create_episode(self, *, env_id: str = "", task_id: str = "", seed: int = 0, group_id: int = 0,
                       episode_id: int | None = None, sampling: dict | None = None,
                       max_calls: int | None = None, turn_seeds: int | None = None) -> EpisodeHandle:
        """Open an episode and return its key and base URL (see ``SessionRegistry.create``)."""
        s = self.registry.create(env_id=env_id, task_id=task_id, seed=seed, group_id=group_id, episode_id=episode_id,
                                 sampling=sampling, max_calls=max_calls, turn_seeds=turn_seeds)
        base = f"{self.url}/e/{s.key}/v1" if self.url else ""
        return EpisodeHandle(s.episode.episode_id, s.key, base, s.key)

    def set_reward(self, episode_id: int, reward: float, *, turn: int | None = None) -> None:
        """Reward of turn ``t=turn``, or of the whole episode (``turn=None``)."""
        self.registry.set_reward(episode_id, reward, turn=turn)

    def close_episode(self, episode_id: int, status: EpisodeStatus | str = EpisodeStatus.OK, error: str = "", *,
                      annotate: Callable[[Episode], None] | None = None) -> Episode:
        """Close, annotate (e.g. verifier rewards), send to the sink and return the episode.
        Later calls with its key get 409."""
        return self.registry.close(episode_id, status, error, annotate=annotate)

    def list_episodes(self) -> list[EpisodeSummary]:
        """Every episode of this proxy (open and closed)."""
        return self.registry.summaries()

    # -- weight updates ------------------------------------------------------------------------
    def pause(self, timeout_s: float | None = None) -> None:
        """Hold new calls (they wait) and return once no call is in flight, so the weights
        can change without a call straddling two policy versions."""
        self.core.gate.pause(timeout_s)

    def resume(self) -> None:
        """Let the held calls proceed (with the new ``policy_version``)."""
        self.core.gate.resume()

    def update_weights(self, source: object, version: int, *, timeout_s: float | None = None) -> None:
        """Load new weights into the engine with no call in flight: ``pause`` (new calls wait or
        get 429, the calls in flight finish under the old weights), ``engine.update_weights``,
        ``resume`` (also when the load raises). Every turn then carries the version of the
        weights that produced it (``Turn.policy_version``).

        Args:
            source: what the engine loads (a checkpoint path or ``(name, tensor)`` pairs).
            version: the new policy version (int).
            timeout_s: most seconds to wait for the calls in flight (None: no limit).
        Raises:
            TimeoutError: calls still in flight after ``timeout_s`` (nothing loaded, admission resumed).
        """
        try:
            self.core.gate.pause(timeout_s)
            self.core.engine.update_weights(source, version)
        finally:
            self.core.gate.resume()

    def __enter__(self) -> "RecordingProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

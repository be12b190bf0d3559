"""The ASGI app: OpenAI-compatible data plane and the ``/admin`` control plane.

Data plane (per episode; the key is the capability, MODELS.md §5.1–5.2):
``POST /e/{key}/v1/chat/completions`` (SSE when ``stream``), ``POST /e/{key}/v1/completions``,
``POST /e/{key}/v1/responses`` (OpenAI Responses, ``responses``), ``POST /e/{key}/v1/messages``
and ``.../messages/count_tokens`` (Anthropic Messages, ``anthropic``), ``GET /e/{key}/v1/models``;
the same routes under ``/v1/...`` take the key as ``Authorization: Bearer {key}`` (or
``X-Episode-Key``, or ``x-api-key``). Every dialect parses into a ``ChatRequest`` and runs on
the same ``ProxyCore`` (``generate``). Control plane (``Authorization:
Bearer {admin_token}``): ``POST /admin/episodes`` ``{env_id, task_id, seed, group_id,
episode_id, sampling, max_calls}``, ``GET /admin/episodes``, ``POST
/admin/episodes/{id}/reward`` ``{reward, turn?}``, ``POST /admin/episodes/{id}/close``
``{status, error}``, ``POST /admin/pause`` ``{timeout_s}``, ``POST /admin/resume``,
``GET /admin/policy_version``; ``GET /healthz`` is open.

The app is a plain ``Starlette`` app (raw ``Request``, ``orjson``, plain ``Response``; MODELS.md
§5.6): no route needs FastAPI's validation, and FastAPI adds three middleware layers per
call. Parsing and prompt building run inline on the event loop (~0.1 ms: one template
render, the new messages encoded), the engine on the ``EngineWorker`` thread, blocking
waits in a thread pool. A call's turn is recorded just before its reply is written
(``PendingCall.commit``: it exists once the harness has the reply, for ``set_reward(turn=t)``
and ``GET /admin/episodes``); the deferred drift measurement runs right after the reply was
written (``PendingCall.finish``), while the harness reads it, and before the episode's next
call is admitted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from agentrl.proxy.anthropic import error_body, message_body, parse_anthropic, sse_anthropic
from agentrl.proxy.calls import PendingCall, ProxyCore
from agentrl.proxy.errors import WireError, bad
from agentrl.proxy.messages import to_template
from agentrl.proxy.responses import parse_responses, remember, response_body, sse_responses
from agentrl.proxy.sse import chat_body, completion_body, sse_chat, sse_completion
from agentrl.proxy.wire import ChatRequest, loads, parse_chat, parse_completion

JSON = "application/json"


def _json(obj, status: int = 200) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type=JSON)


def _error(exc: WireError) -> Response:
    return Response(exc.body(), status_code=exc.status, media_type=JSON, headers=exc.headers())


def _anthropic_error(exc: WireError) -> Response:
    return Response(error_body(exc), status_code=exc.status, media_type=JSON, headers=exc.headers())


#: Error answers that do not break an episode: an unknown key (no episode), a closed episode or
#: one past its ``max_calls`` (nothing was sampled), a 429 during a weight update (retry).
_NOT_A_FAILURE = (401, 409, 429)


def _bearer(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return request.headers.get("x-episode-key") or request.headers.get("x-api-key")  # x-api-key: Anthropic SDKs


def build_app(core: ProxyCore, *, admin_token: str, base_url: Callable[[], str], threads: int = 64) -> Starlette:
    """The ASGI app over ``core``.

    Args:
        admin_token: bearer token of the ``/admin`` routes.
        base_url: ``() -> "http://host:port"`` (known once the server is bound).
        threads: worker threads for blocking calls (≥ concurrent harnesses).
    """
    app = Starlette()
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="agentrl-proxy")
    vocab = _vocab_size(core.renderer)


    async def run(fn, *args):
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)

    def session_of(request: Request):
        return core.registry.by_key(request.path_params.get("key") or _bearer(request))

    async def generate(request: Request, parse, body, stream, error=_error) -> Response:
        """One data-plane call in any dialect: ``parse(data, session) -> ChatRequest`` or a
        context with ``.req``; ``body(call, ctx)`` / ``stream(call, ctx)`` write the reply;
        ``error`` formats a ``WireError``; an error answered to an episode's call is noted on
        it (``EpisodeSession.note_failure``: the episode closes ``aborted``)."""
        session = None
        try:
            session = session_of(request)
            data = loads(await request.body())
            ctx = parse(data, session)
            req = ctx if isinstance(ctx, ChatRequest) else ctx.req
            if session.closed:
                raise WireError(409, f"episode {session.episode.episode_id} is closed", kind="conflict")
            call: PendingCall = await _watch(request, core.start_async(session, req, run))
        except WireError as exc:
            if session is not None and exc.status not in _NOT_A_FAILURE:
                session.note_failure("model_call_failed", f"answered {exc.status}: {exc.message}")
            return error(exc)
        if call is None:  # the client left while the engine ran; start() finished the call
            return Response(status_code=499)
        if req.stream:
            return _stream(call, stream(call, ctx))
        return _deliver(call, lambda c: body(c, ctx))

    async def chat_completions(request: Request) -> Response:
        return await generate(request, lambda d, s: parse_chat(d, core.sampling, strict=core.strict_fields),
                              lambda c, _: chat_body(c), lambda c, _: sse_chat(c))

    async def completions(request: Request) -> Response:
        return await generate(request, lambda d, s: parse_completion(d, core.sampling, vocab, strict=core.strict_fields),
                              lambda c, _: completion_body(c), lambda c, _: sse_completion(c))

    def responses_body(call: PendingCall, rc) -> dict:
        remember(call.session.responses, rc, call)
        return response_body(call, rc)

    def responses_stream(call: PendingCall, rc):
        remember(call.session.responses, rc, call)
        return sse_responses(call, rc)

    async def responses(request: Request) -> Response:
        return await generate(request, lambda d, s: parse_responses(d, core.sampling, strict=core.strict_fields,
                                                                    stored=s.responses),
                              responses_body, responses_stream)

    async def messages(request: Request) -> Response:
        return await generate(request, lambda d, s: parse_anthropic(d, core.sampling, strict=core.strict_fields),
                              lambda c, _: message_body(c), lambda c, _: sse_anthropic(c), _anthropic_error)

    async def count_tokens(request: Request) -> Response:
        """Anthropic ``messages/count_tokens``: the tokens of a fresh render (nothing recorded)."""
        try:
            session_of(request)
            data = loads(await request.body())
            req = parse_anthropic({**data, "max_tokens": 1}, core.sampling)
            with core._render_lock:
                n = core.renderer.render_ids(to_template(req.messages, req.tools)).size
        except WireError as exc:
            return _anthropic_error(exc)
        return _json({"input_tokens": int(n)})

    async def models(request: Request) -> Response:
        try:
            session_of(request)
        except WireError as exc:
            return _error(exc)
        return _json({"object": "list", "data": [{"id": core.model_name, "object": "model", "created": int(time.time()),
                                                  "owned_by": "agentrl"}]})

    for prefix in ("/e/{key}/v1", "/v1"):
        app.add_route(prefix + "/chat/completions", chat_completions, methods=["POST"])
        app.add_route(prefix + "/completions", completions, methods=["POST"])
        app.add_route(prefix + "/responses", responses, methods=["POST"])
        app.add_route(prefix + "/messages", messages, methods=["POST"])
        app.add_route(prefix + "/messages/count_tokens", count_tokens, methods=["POST"])
        app.add_route(prefix + "/models", models, methods=["GET"])
    app.add_route("/healthz", lambda request: _json({"ok": True, "paused": core.gate.paused}), methods=["GET"])
    _admin_routes(app, core, admin_token, base_url, run)
    app.state.pool = pool  # shut down by RecordingProxy.stop
    return app


def _vocab_size(renderer) -> int | None:
    """Number of token ids the policy's tokenizer knows (``len(tokenizer)``, added tokens
    included), or None when the renderer has no sized tokenizer."""
    try:
        return int(len(renderer.tokenizer))
    except (AttributeError, TypeError):
        return None


def _deliver(call: PendingCall, make_body):
    """A JSON response that records the call before the body is sent and finishes it (drift
    metric, episode released) once the body was handed to the server; the next request of
    the episode waits for that, never races it. A response that fails to build or send
    records an aborted, non-trainable turn."""
    try:
        response = Response(orjson.dumps(make_body(call)), media_type=JSON)
        call.commit()
    except BaseException:
        call.finish(False)
        raise

    async def asgi(scope, receive, send) -> None:
        delivered = False
        try:
            await response(scope, receive, send)
            delivered = True
        finally:
            call.finish(delivered)
    return asgi


def _stream(call: PendingCall, gen):
    """An SSE response that finishes the call even if streaming never starts (client gone
    before the headers); ``finish`` is idempotent, so a delivered stream stays delivered."""
    response = StreamingResponse(gen, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    async def asgi(scope, receive, send) -> None:
        try:
            await response(scope, receive, send)
        finally:
            call.finish(False)
    return asgi


async def _watch(request: Request, work) -> PendingCall | None:
    """Await the engine work; if the client disconnects meanwhile, finish the call as aborted
    (not trainable) and return None."""
    task = asyncio.ensure_future(work)
    while True:
        done, _ = await asyncio.wait({task}, timeout=0.25)
        if done:
            return task.result()
        if await request.is_disconnected():
            call = await task
            await asyncio.get_running_loop().run_in_executor(None, call.finish, False)
            return None


def _admin_routes(app: Starlette, core: ProxyCore, admin_token: str, base_url, run) -> None:
    reg = core.registry

    def guard(request: Request) -> None:
        if not hmac.compare_digest(_bearer(request) or "", admin_token):
            raise WireError(401, "admin routes need 'Authorization: Bearer <admin token>' (printed by "
                                 "`agentrl proxy serve`)", kind="authentication_error")

    def admin(fn):
        async def handler(request: Request) -> Response:
            try:
                guard(request)
                body = loads(await request.body()) if request.method == "POST" and await request.body() else {}
                return _json(await run(fn, request, body))
            except WireError as exc:
                return _error(exc)
            except KeyError as exc:
                return _error(WireError(404, str(exc.args[0]), kind="not_found_error"))
            except (ValueError, TypeError) as exc:
                return _error(bad(str(exc)))
            except TimeoutError as exc:
                return _error(WireError(503, str(exc), kind="server_error"))
        return handler

    def create(request, body):
        s = reg.create(**{k: body[k] for k in ("env_id", "task_id", "seed", "group_id", "episode_id", "sampling",
                                               "max_calls", "turn_seeds") if k in body})
        url = f"{base_url()}/e/{s.key}/v1"
        return {"episode_id": s.episode.episode_id, "key": s.key, "base_url": url, "api_key": s.key}

    def reward(request, body):
        if "reward" not in body:
            raise bad("body needs 'reward' (and optionally 'turn')", "reward")
        reg.set_reward(int(request.path_params["eid"]), body["reward"], turn=body.get("turn"))
        return {"ok": True}

    def close(request, body):
        ep = reg.close(int(request.path_params["eid"]), body.get("status", "ok"), body.get("error", ""))
        return {"episode_id": ep.episode_id, "status": ep.status.value, "turns": len(ep.turns), "return": ep.return_}

    def pause(request, body):
        core.gate.pause(body.get("timeout_s"))
        return {"paused": True, "policy_version": int(core.engine.policy_version)}

    def resume(request, body):
        core.gate.resume()
        return {"paused": False, "policy_version": int(core.engine.policy_version)}

    routes = [("/admin/episodes", create, "POST"),
              ("/admin/episodes", lambda r, b: {"episodes": [dataclasses.asdict(x) for x in reg.summaries()]}, "GET"),
              ("/admin/episodes/{eid:int}/reward", reward, "POST"), ("/admin/episodes/{eid:int}/close", close, "POST"),
              ("/admin/pause", pause, "POST"), ("/admin/resume", resume, "POST"),
              ("/admin/policy_version", lambda r, b: {"policy_version": int(core.engine.policy_version)}, "GET")]
    for path, fn, method in routes:
        app.add_route(path, admin(fn), methods=[method])

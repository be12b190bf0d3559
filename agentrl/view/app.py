"""The viewer's ASGI app (FastAPI + server-rendered Jinja2 templates shipped in the package).

Routes (all GET, query parameters only, so any run id works):
``/`` runs · ``/run?run=R`` charts, iterations, groups · ``/iteration?run=R&iteration=I`` ·
``/group?run=R&group=G[&sort=advantage&desc=1&page=2]`` · ``/siblings?run=R&group=G`` (episodes
side by side) · ``/episode?run=R&episode=E`` · ``/search?run=R&q=TEXT[&in=action]``. Filters
(``env``, ``task``, ``success``, ``estimator``, ``iteration``, ``policy_version``) and cursors
(``after``, ``before``) are query parameters too. Each request opens its own read-only
connection. A missing or malformed parameter (``?episode=abc``, ``?page=-1``), an unknown
path or an unexpected error is answered with the viewer's error page (400 / 404 / 500),
never a bare JSON body.
"""


import sqlite3
from contextlib import closing
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Callable

from agentrl.view import group_pages as gp
from agentrl.view import pages
from agentrl.view.search import FIELDS
from agentrl.view.db import index_warnings, open_read
from agentrl.view.queries import Filters
from agentrl.view.totals import RunTotals


@dataclass(frozen=True, slots=True)
class ViewerOptions:
    """Settings of one viewer.

    Attributes:
        store: the SQLite turn store (must exist).
        tokenizer: ``tokenizer.json`` or a model folder used to decode every run's tokens
            (default: the run's ``config.yaml`` beside the store, else ids only).
        page_size: rows per page of runs, iterations, groups and episodes.
        turns_per_page: turns per page of an episode.
    """

    store: Path
    tokenizer: str | None = None
    page_size: int = 50
    turns_per_page: int = 10


class BadQuery(ValueError):
    """A query parameter has the wrong type; answered with HTTP 400 and the message."""


#: Integers a query parameter may hold (SQLite's INTEGER is 64-bit).
INT_RANGE = (-(2**63), 2**63 - 1)


def _int(params, name: str) -> int | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise BadQuery(f"query parameter {name}={raw!r} is not an integer; pass e.g. {name}=3") from None
    if not INT_RANGE[0] <= value <= INT_RANGE[1]:
        raise BadQuery(f"query parameter {name}={raw!r} is out of range (a 64-bit integer)")
    return value


def _required_int(params, name: str) -> int:
    value = _int(params, name)
    if value is None:
        raise BadQuery(f"query parameter {name} is missing; pass e.g. {name}=3")
    return value


def _required(params, name: str) -> str:
    value = params.get(name)
    if not value:
        raise BadQuery(f"query parameter {name} is missing; pass e.g. {name}=... (the runs page links to every run)")
    return value


def _page(params, name: str = "page") -> int:
    """A 1-based page number (default 1). Raises BadQuery below 1."""
    value = _int(params, name)
    if value is not None and value < 1:
        raise BadQuery(f"query parameter {name}={value} must be ≥ 1 (pages count from 1)")
    return 1 if value is None else value


def _choice(params, name: str, allowed: tuple[str, ...]) -> str:
    value = params.get(name) or allowed[0]
    if value not in allowed:
        raise BadQuery(f"query parameter {name}={value!r} must be one of {', '.join(allowed)}")
    return value


def _flag(params, name: str) -> bool:
    value = (params.get(name) or "0").lower()
    if value not in ("0", "1", "true", "false", "yes", "no"):
        raise BadQuery(f"query parameter {name}={value!r} must be 1 or 0")
    return value in ("1", "true", "yes")


def parse_filters(params) -> Filters:
    """``Filters`` from request query parameters (empty values = unset).

    Raises:
        BadQuery: ``success`` not in 0/1/true/false, or a non-integer iteration/policy_version.
    """
    success = params.get("success") or None
    if success is not None:
        if success.lower() not in ("0", "1", "true", "false", "yes", "no"):
            raise BadQuery(f"query parameter success={success!r} must be 1 or 0")
        success = success.lower() in ("1", "true", "yes")
    return Filters(env=params.get("env") or None, task=params.get("task") or None, success=success,
                   estimator=params.get("estimator") or None, iteration=_int(params, "iteration"),
                   policy_version=_int(params, "policy_version"))


def create_app(options: ViewerOptions):
    """The FastAPI app over ``options.store``; it never writes the store (read-only connections).

    The store is checked once here (``quick_check``, ~1 s per million turns); ``app.state.warnings``
    says when it lacks the indexes of the current schema (pages slower, still correct).

    Raises:
        FileNotFoundError: no store file. StoreDamagedError: the file fails SQLite's integrity
            check. StoreError / SchemaVersionError: not a readable store.
        ImportError: fastapi / jinja2 missing (``pip install 'agentrl[view]'``).
    """
    try:
        import jinja2
        from fastapi import FastAPI
        from fastapi.templating import Jinja2Templates
    except ImportError as exc:
        raise ImportError(f"agentrl view needs fastapi and jinja2 ({exc.name} missing): pip install 'agentrl[view]'") from exc
    store = Path(options.store)
    with closing(open_read(store, check=True)) as conn:  # fail now, with the store's message
        warnings = index_warnings(conn, store)
    # autoescape every template: stored text (observations, actions, run ids) is untrusted
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(files("agentrl.view") / "templates")), autoescape=True)
    templates = Jinja2Templates(env=env)
    app = FastAPI(title="agentrl view", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.warnings = warnings

    def error_page(request, status: int, title: str, message: str):
        return templates.TemplateResponse(request, "error.html.j2", {"message": message, "title": title,
                                                                     "store": store, "warnings": warnings},
                                          status_code=status)

    _add_error_handlers(app, error_page)

    def render(request, name: str, build: Callable[[sqlite3.Connection], object]):
        """Build the page on a fresh read connection and render it; user errors become 400 / 404 pages."""
        try:
            with closing(open_read(store)) as conn:
                page = build(conn)
        except BadQuery as exc:
            return error_page(request, 400, "bad request", str(exc))
        except KeyError as exc:
            return error_page(request, 404, "not found", exc.args[0] if exc.args else str(exc))
        return templates.TemplateResponse(request, name, {"page": page, "store": store, "warnings": warnings})

    _add_routes(app, render, options, store)
    return app


def _add_error_handlers(app, error_page: Callable) -> None:
    """FastAPI's own errors (a missing/ill-typed parameter: 422 JSON; an unknown path: 404 JSON;
    an exception: a bare 500) as the viewer's error page."""
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException

    @app.exception_handler(RequestValidationError)
    async def bad_params(request, exc):
        parts = [f"{'.'.join(str(x) for x in e.get('loc', ())[1:]) or 'request'}: {e.get('msg', '')}"
                 for e in exc.errors()]
        return error_page(request, 400, "bad request", "; ".join(parts))

    @app.exception_handler(HTTPException)
    async def http_error(request, exc):
        title = "not found" if exc.status_code == 404 else f"HTTP {exc.status_code}"
        msg = f"no page at {request.url.path}; the runs page (/) links to every page" if exc.status_code == 404 \
            else str(exc.detail)
        return error_page(request, exc.status_code, title, msg)

    @app.exception_handler(Exception)
    async def crash(request, exc):
        return error_page(request, 500, "internal error", f"{type(exc).__name__}: {exc} (a viewer bug: please report "
                                                          "it with the URL)")


def _add_routes(app, render: Callable, options: ViewerOptions, store: Path) -> None:
    from fastapi import Request
    from fastapi.responses import HTMLResponse

    totals = RunTotals()  # run totals, updated incrementally (the store is append-only)

    def cursors(request: Request) -> dict:
        p = request.query_params
        return {"after": _int(p, "after"), "before": _int(p, "before")}

    @app.get("/", response_class=HTMLResponse)
    def runs(request: Request):
        return render(request, "runs.html.j2", lambda c: totals.summaries(c, **cursors(request), limit=options.page_size))

    @app.get("/run", response_class=HTMLResponse)
    def run(request: Request):
        p = request.query_params
        return render(request, "run.html.j2", lambda c: pages.run_page(
            c, totals, _required(p, "run"), parse_filters(p), **cursors(request), iter_page=_page(p, "ipage"),
            page_size=options.page_size))

    @app.get("/iteration", response_class=HTMLResponse)
    def iteration(request: Request):
        p = request.query_params
        return render(request, "iteration.html.j2", lambda c: pages.iteration_page(
            c, _required(p, "run"), _required_int(p, "iteration"), parse_filters(p), **cursors(request),
            page_size=options.page_size))

    @app.get("/group", response_class=HTMLResponse)
    def group(request: Request):
        p = request.query_params
        return render(request, "group.html.j2", lambda c: gp.group_page(
            c, _required(p, "run"), _required_int(p, "group"), parse_filters(p), sort=_choice(p, "sort", gp.SORTS),
            desc=_flag(p, "desc"), page=_page(p), page_size=options.page_size))

    @app.get("/siblings", response_class=HTMLResponse)
    def siblings(request: Request):
        p = request.query_params
        return render(request, "siblings.html.j2", lambda c: gp.siblings_page(
            c, store, _required(p, "run"), _required_int(p, "group"), parse_filters(p), **cursors(request)))

    @app.get("/episode", response_class=HTMLResponse)
    def episode(request: Request):
        p = request.query_params
        return render(request, "episode.html.j2", lambda c: pages.episode_page(
            c, store, _required(p, "run"), _required_int(p, "episode"), parse_filters(p), **cursors(request),
            page_size=options.turns_per_page, tokenizer=options.tokenizer))

    @app.get("/search", response_class=HTMLResponse)
    def search(request: Request):
        p = request.query_params
        return render(request, "search.html.j2", lambda c: pages.search_page(
            c, _required(p, "run"), p.get("q") or "", where=_choice(p, "in", FIELDS), after=_int(p, "after"),
            page_size=options.page_size))

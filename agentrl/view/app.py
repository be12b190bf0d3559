"""The viewer's ASGI app (FastAPI + server-rendered Jinja2 templates shipped in the package).

Routes (all GET, query parameters only, so any run id works):
``/`` runs · ``/run?run=R`` charts, iterations, groups · ``/iteration?run=R&iteration=I`` ·
``/group?run=R&group=G`` · ``/episode?run=R&episode=E``. Filters (``env``, ``task``,
``success``, ``estimator``, ``iteration``, ``policy_version``) and cursors (``after``,
``before``) are query parameters too. Each request opens its own read-only connection.
"""


import sqlite3
from contextlib import closing
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Callable

from agentrl.view import pages
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


def _int(params, name: str) -> int | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise BadQuery(f"query parameter {name}={raw!r} is not an integer; pass e.g. {name}=3") from None


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

    def render(request, name: str, build: Callable[[sqlite3.Connection], object]):
        """Build the page on a fresh read connection and render it; user errors become 400 / 404 pages."""
        try:
            with closing(open_read(store)) as conn:
                page = build(conn)
        except BadQuery as exc:
            return templates.TemplateResponse(request, "error.html.j2", {"message": str(exc), "title": "bad request"},
                                              status_code=400)
        except KeyError as exc:
            msg = exc.args[0] if exc.args else str(exc)
            return templates.TemplateResponse(request, "error.html.j2", {"message": msg, "title": "not found"},
                                              status_code=404)
        return templates.TemplateResponse(request, name, {"page": page, "store": store, "warnings": warnings})

    _add_routes(app, render, options, store)
    return app


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
    def run(request: Request, run: str):
        return render(request, "run.html.j2", lambda c: pages.run_page(
            c, totals, run, parse_filters(request.query_params), **cursors(request),
            iter_page=_int(request.query_params, "ipage") or 1, page_size=options.page_size))

    @app.get("/iteration", response_class=HTMLResponse)
    def iteration(request: Request, run: str, iteration: int):
        return render(request, "iteration.html.j2", lambda c: pages.iteration_page(
            c, run, iteration, parse_filters(request.query_params), **cursors(request), page_size=options.page_size))

    @app.get("/group", response_class=HTMLResponse)
    def group(request: Request, run: str, group: int):
        return render(request, "group.html.j2", lambda c: pages.group_page(
            c, run, group, parse_filters(request.query_params), **cursors(request), page_size=options.page_size))

    @app.get("/episode", response_class=HTMLResponse)
    def episode(request: Request, run: str, episode: int):
        return render(request, "episode.html.j2", lambda c: pages.episode_page(
            c, store, run, episode, parse_filters(request.query_params), **cursors(request),
            page_size=options.turns_per_page, tokenizer=options.tokenizer))

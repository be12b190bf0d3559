"""The house has no import circle (issue 41): every room reads top to bottom.

The import graph of ``agentrl``, ``agentrl_envs`` and ``agentrl_sandboxes`` is built with
grimp (installed with import-linter), which reads every ``import`` statement: at module level,
inside functions (lazy imports) and under ``TYPE_CHECKING``. A strongly connected component
of more than one module is a circle; the test names each one with the lines that close it.
import-linter's layer contracts (``bash scripts/test.sh`` runs them) only see imports across
the layers they name; this test sees every module.
"""

from __future__ import annotations

import ast
import re
import textwrap
import tomllib
from pathlib import Path

import grimp
import pytest

PACKAGES = ("agentrl", "agentrl_envs", "agentrl_sandboxes")


def circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The import circles of ``graph``: its strongly connected components of two or more
    modules (or one module importing itself), each sorted, the list sorted (Tarjan's
    algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.append(member)
                    if member == node:
                        break
                if len(comp) > 1 or graph.direct_import_exists(importer=node, imported=node):
                    out.append(sorted(comp))
    return sorted(out)


def describe(graph: grimp.ImportGraph, comp: list[str]) -> str:
    """One circle of ``comp`` as ``a -> b -> a`` with the line of each import."""
    first = comp[0]
    nxt = next(m for m in sorted(graph.find_modules_directly_imported_by(first)) if m in comp)
    path = [first, *(graph.find_shortest_chain(importer=nxt, imported=first) or (nxt, first))]
    lines = []
    for a, b in zip(path, path[1:]):
        details = graph.get_import_details(importer=a, imported=b)
        where = "; ".join(f"line {d['line_number']}: {d['line_contents'].strip()}" for d in details)
        lines.append(f"  {a} -> {b}  ({where})")
    return f"circle of {len(comp)} module(s) {comp}:\n" + "\n".join(lines)


def test_no_import_circle_in_the_house():
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)  # no cache folder in the tree
    assert "agentrl.proxy.wire" in graph.modules and "agentrl_envs" in graph.modules
    found = circles(graph)
    assert not found, ("import circles (break each so that the room reads top to bottom):\n"
                       + "\n".join(describe(graph, c) for c in found))


def test_circles_finds_each_circle_and_nothing_else():
    graph = grimp.ImportGraph()
    for a, b in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.d", "p.a"), ("p.c", "p.e"),
                 ("p.f", "p.f"), ("p.g", "p.h"), ("p.h", "p.g")]:
        graph.add_import(importer=a, imported=b, line_number=1, line_contents=f"import {b}")
    graph.add_module("p.lone")
    assert circles(graph) == [["p.a", "p.b", "p.c"], ["p.f"], ["p.g", "p.h"]]
    text = describe(graph, ["p.a", "p.b", "p.c"])
    assert "p.a -> p.b" in text and "p.b -> p.c" in text and "p.c -> p.a  (line 1: import p.a)" in text


def test_a_lazy_import_inside_a_function_closes_a_circle(tmp_path, monkeypatch):
    # the circle proxy.wire <-> proxy.forcing was closed by an import inside parse_chat
    pkg = tmp_path / "house_probe_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    from house_probe_pkg.high import g\n    return g\n")
    (pkg / "high.py").write_text("from house_probe_pkg.low import f\n\ndef g():\n    return f\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("house_probe_pkg", cache_dir=None)
    assert circles(graph) == [["house_probe_pkg.high", "house_probe_pkg.low"]]
    assert "line 2: from house_probe_pkg.high import g" in describe(graph, circles(graph)[0])


@pytest.mark.parametrize("module, must_not_import", [
    ("agentrl.proxy.forcing", "agentrl.proxy.wire"),  # both read their errors from proxy.errors
    ("agentrl.rollout.scripted", "agentrl.rollout"),  # the runners read the request from rollout.request
    ("agentrl.rollout.llm_runner", "agentrl.rollout"),
])
def test_the_broken_circles_stay_broken(module, must_not_import):
    graph = grimp.build_graph("agentrl", cache_dir=None)
    assert module in graph.modules
    assert not graph.direct_import_exists(importer=module, imported=must_not_import)


# --------------------------------------------------------------------------- estimators declare, rooms serve (issue 47)
# The trainer, the update and the agent loop serve what an estimator declares at registration
# (agentrl.credit.declarations); none of them imports an estimator's module or compares the
# configured estimator with a name. The AST is read (not grep), so a lazy import inside a
# function, ``from agentrl.credit import hiper`` and an alias ``est = cfg.algorithm.estimator``
# followed by ``est == "hiper"`` are all seen.

SERVING_ROOMS = ("train", "update", "rollout")


def _estimator_modules() -> set[str]:
    from agentrl.credit import get_estimator, list_estimators

    return {get_estimator(n).fn.__module__ for n in list_estimators()}


def _imported_modules(tree: ast.AST) -> set[str]:
    """Every module a file imports: ``import a.b`` → a.b; ``from a import b`` → a and a.b."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return out


def _is_estimator_attr(node: ast.AST) -> bool:
    """``<anything>.algorithm.estimator``."""
    return (isinstance(node, ast.Attribute) and node.attr == "estimator"
            and isinstance(node.value, ast.Attribute) and node.value.attr == "algorithm")


def _estimator_name_comparisons(tree: ast.AST) -> list[int]:
    """Lines comparing ``*.algorithm.estimator`` (or a local name assigned from it) with anything."""
    aliases = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign) and _is_estimator_attr(node.value)
               for t in node.targets if isinstance(t, ast.Name)}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_is_estimator_attr(o) or (isinstance(o, ast.Name) and o.id in aliases) for o in operands):
                lines.append(node.lineno)
        elif isinstance(node, ast.Match) and (_is_estimator_attr(node.subject) or (
                isinstance(node.subject, ast.Name) and node.subject.id in aliases)):
            lines.append(node.lineno)
    return lines


def _room_files(room: str) -> list[Path]:
    import agentrl

    return sorted((Path(agentrl.__file__).parent / room).rglob("*.py"))


@pytest.mark.parametrize("room", SERVING_ROOMS)
def test_no_serving_room_imports_an_estimator_module(room):
    estimators = _estimator_modules()
    assert {"agentrl.credit.hiper", "agentrl.credit.threespo", "agentrl.credit.turn_ppo"} <= estimators
    bad = {}
    for path in _room_files(room):
        hits = sorted(_imported_modules(ast.parse(path.read_text())) & estimators)
        if hits:
            bad[path.name] = hits
    assert not bad, (f"agentrl.{room} imports estimator modules {bad}: serve the estimator's declarations "
                     "(register_estimator(critic=, store_query=, scorers=, action_format=, spans=)) instead")


@pytest.mark.parametrize("room", SERVING_ROOMS)
def test_no_serving_room_compares_the_estimator_with_a_name(room):
    bad = {path.name: lines for path in _room_files(room)
           if (lines := _estimator_name_comparisons(ast.parse(path.read_text())))}
    assert not bad, f"agentrl.{room} branches on algorithm.estimator at {bad}: declare what it needs instead"


def test_the_scans_see_what_they_forbid():
    src = ("from agentrl.credit import hiper\nimport agentrl.credit.threespo as t\n"
           "def f(cfg):\n    from agentrl.credit.turn_ppo import gae_targets\n    est = cfg.algorithm.estimator\n"
           "    if est == 'hiper':\n        return 1\n    return cfg.algorithm.estimator in ('a',)\n"
           "def g(cfg):\n    return cfg.rollout.sampler == 'rtpo'\n")
    tree = ast.parse(src)
    assert {"agentrl.credit.hiper", "agentrl.credit.threespo", "agentrl.credit.turn_ppo"} <= _imported_modules(tree)
    assert _estimator_name_comparisons(tree) == [6, 8]
# --------------------------------------------------------------------------- the bottom layer (issue 47)

ROOT = Path(__file__).resolve().parents[1]
#: Layer L0 (pyproject.toml's import-linter "agentrl layers", last line): imports nothing of ours above it
BOTTOM = ("agentrl.types", "agentrl.turn_info", "agentrl.failures", "agentrl.deadline", "agentrl.serve_limits",
          "agentrl.config", "agentrl.registry", "agentrl.log")
_IMPORTERS = {"import_module", "__import__"}
_MODULE_PATH = re.compile(r"agentrl(\.\w+)+")


def _in_bottom(module: str) -> bool:
    return any(module == b or module.startswith(b + ".") for b in BOTTOM)


def bottom_files() -> dict[str, Path]:
    """Module name -> file of every module of the bottom layer; the old top-level ``config*.py``
    modules too, where they still exist, so that their imports are read as well."""
    pkg = ROOT / "agentrl"
    files = {f"agentrl.{p.stem}": p for p in sorted(pkg.glob("config*.py"))}
    for name in BOTTOM:
        path = pkg / (name.split(".", 1)[1].replace(".", "/"))
        if path.is_dir():
            files.update({".".join(("agentrl", *f.relative_to(pkg).with_suffix("").parts)).removesuffix(".__init__"): f
                          for f in sorted(path.rglob("*.py"))})
        elif path.with_suffix(".py").is_file():
            files[name] = path.with_suffix(".py")
    return files


def upward_imports(module: str, source: str, *, is_package: bool = False) -> list[str]:
    """Where ``source`` (module ``module``; ``is_package``: its ``__init__``) reaches ``agentrl``
    outside the bottom layer: ``import`` statements anywhere (module level, functions,
    TYPE_CHECKING; relative ones resolved), and ``importlib.import_module`` / ``__import__`` — or
    any other call — given a literal module path ``agentrl.…`` (a string or the start of an
    f-string). Each as ``line N: what``."""
    out = []
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names] if base == "agentrl" else [base]
        for name in names:
            if (name == "agentrl" or name.startswith("agentrl.")) and not _in_bottom(name):
                out.append(f"line {node.lineno}: import {name}")
        if isinstance(node, ast.Call):
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            for arg in node.args:
                text = arg.value if isinstance(arg, ast.Constant) else (
                    arg.values[0].value if isinstance(arg, ast.JoinedStr) and arg.values
                    and isinstance(arg.values[0], ast.Constant) else None)
                if not isinstance(text, str):
                    continue
                if func in _IMPORTERS and text.startswith("agentrl"):
                    out.append(f"line {node.lineno}: {func}({text!r})")
                elif func not in _IMPORTERS and _MODULE_PATH.fullmatch(text) and not _in_bottom(text):
                    out.append(f"line {node.lineno}: {func}({text!r})")
    return out


def test_the_bottom_layer_imports_nothing_above_it():
    """agentrl.types, turn_info, failures, deadline, serve_limits, config, registry and log import no agentrl module
    above them:
    not statically, not through importlib (the import-linter contracts cannot see a string)."""
    files = bottom_files()
    found = {m: hits for m, f in files.items()
             if (hits := upward_imports(m, f.read_text(encoding="utf-8"), is_package=f.name == "__init__.py"))}
    assert not found, "the bottom layer reaches up:\n" + "\n".join(
        f"  {m} ({files[m].relative_to(ROOT)}): {'; '.join(h)}" for m, h in sorted(found.items()))
    assert {"agentrl.config", "agentrl.config.loader", "agentrl.log", "agentrl.types"} <= set(files)


def test_config_is_one_package_and_the_contracts_name_it():
    assert not sorted(p.name for p in (ROOT / "agentrl").glob("config*.py")), "agentrl/config*.py came back"
    assert (ROOT / "agentrl" / "config" / "__init__.py").is_file()
    toml = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    layers = next(c for c in toml["tool"]["importlinter"]["contracts"] if c["name"] == "agentrl layers")["layers"]
    assert tuple(m.strip() for m in re.split(r"[:|]", layers[-1])) == BOTTOM


def test_upward_imports_finds_each_way_up():
    src = textwrap.dedent("""
        import importlib
        from agentrl.config.sections import Config
        from . import errors
        from .. import env
        import agentrl.credit
        if False:
            from agentrl.update import losses
        def f(name):
            importlib.import_module("agentrl.env")
            __import__(f"agentrl.{name}")
            importlib.import_module("wandb")
            _require("agentrl.update.losses", "llm")
            logging.getLogger(__name__)
    """)
    hits = upward_imports("agentrl.config.checks", src)
    assert hits == ["line 5: import agentrl.env", "line 6: import agentrl.credit", "line 8: import agentrl.update",
                    "line 10: import_module('agentrl.env')", "line 11: __import__('agentrl.')",
                    "line 13: _require('agentrl.update.losses')"], hits

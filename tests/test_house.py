"""The house has no import circle (issue 41): every room reads top to bottom.

The import graph of ``agentrl``, ``agentrl_envs`` and ``agentrl_sandboxes`` is built with
grimp (installed with import-linter), which reads every ``import`` statement: at module level,
inside functions (lazy imports) and under ``TYPE_CHECKING``. A strongly connected component
of more than one module is a circle; the test names each one with the lines that close it.
import-linter's layer contracts (``bash scripts/test.sh`` runs them) only see imports across
the layers they name; this test sees every module.
"""

from __future__ import annotations

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

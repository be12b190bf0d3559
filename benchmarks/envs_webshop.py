"""Benchmark ``agentrl/WebShop-v0`` step latency against the bare engine functions.

Side by side in one run (median and p90 over ``--n`` calls, microseconds):

- ``search step``: ``env.step("search[<query>]")`` from the search page vs the bare BM25 query
  ``engine.search(query)`` (same queries: the instructions of ``--n`` goals);
- ``click step``: ``env.step("click[<asin>]")`` from a results page vs the bare item-page
  render ``pages.item_page(...)`` of the same product; plus ``click[next >]`` vs a bare
  results-page render;
- ``reset``: ``env.reset(options={"task_id": ...})`` (includes the oracle's one BM25 query);
- ``buy``: ``env.step("click[buy now]")`` vs the bare ``reward.get_reward``;
- one-time costs: world load (catalogue + goals) and BM25 index build.

The ratio column is env / bare (the wrapper's overhead factor). Output: JSON to
``benchmarks/results/envs_webshop.json``.

Usage: ``python benchmarks/envs_webshop.py [--n 300] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _stats(us: list[float]) -> dict[str, float]:
    us = sorted(us)
    p90 = us[int(0.9 * (len(us) - 1))]
    return {"median_us": round(statistics.median(us), 2), "p90_us": round(p90, 2), "n": len(us)}


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e6


def _pair(env_us: list[float], bare_us: list[float]) -> dict[str, object]:
    e, b = _stats(env_us), _stats(bare_us)
    return {"env": e, "bare": b, "ratio_median": round(e["median_us"] / b["median_us"], 2)}


def run(n: int) -> dict[str, object]:
    """Measure everything (module docstring); returns the JSON-ready result."""
    from agentrl_envs.webshop import search as search_mod
    from agentrl_envs.webshop.data import resolve_data_dir
    from agentrl_envs.webshop.env import VERSION, WebShopEnv
    from agentrl_envs.webshop.pages import item_page, page_slice, results_page
    from agentrl_envs.webshop.policies import oracle_query
    from agentrl_envs.webshop.reward import get_reward

    t0 = time.perf_counter()
    env = WebShopEnv()
    first_build_s = time.perf_counter() - t0
    w = env.world
    t0 = time.perf_counter()
    search_mod.build_engine(w.catalogue.contents)
    index_s = time.perf_counter() - t0
    goals = w.goals[:: max(1, len(w.goals) // n)][:n]
    out: dict[str, dict] = {"search": {"env": [], "bare": []}, "click_item": {"env": [], "bare": []},
                            "click_next": {"env": [], "bare": []}, "buy": {"env": [], "bare": []}, "reset": []}
    for g in goals:
        query = oracle_query(g.instruction_text)
        out["reset"].append(_timed(lambda: env.reset(options={"task_id": g.task_id})))
        # alternate the order so neither side always finds the stemmer's word cache warm
        pair = [("bare", lambda: w.engine.search(query)), ("env", lambda: env.step(f"search[{query}]"))]
        for side, fn in (pair if len(out["reset"]) % 2 else pair[::-1]):
            out["search"][side].append(_timed(fn))
        results = env.session.results
        shown = [w.catalogue.products[i] for i in page_slice(results, 2)]
        out["click_next"]["env"].append(_timed(lambda: env.step("click[next >]")))
        out["click_next"]["bare"].append(_timed(lambda: results_page(g.instruction_text, shown, 2, len(results))))
        target = w.catalogue.products[results[10]] if len(results) > 10 else None
        if target is None:
            continue
        out["click_item"]["env"].append(_timed(lambda: env.step(f"click[{target.asin.lower()}]")))
        out["click_item"]["bare"].append(_timed(lambda: item_page(g.instruction_text, target)))
        out["buy"]["env"].append(_timed(lambda: env.step("click[buy now]")))
        out["buy"]["bare"].append(_timed(lambda: get_reward(target, g, w.prices[target.asin], [])))
    env.close()
    return {
        "benchmark": "envs_webshop", "env_version": VERSION, "python": platform.python_version(),
        "machine": platform.machine(), "data_dir": str(resolve_data_dir()), "goals_timed": len(goals),
        "one_time_s": {"first_env_construction": round(first_build_s, 3), "bm25_index_build": round(index_s, 3)},
        "reset": _stats(out.pop("reset")),
        "steps": {k: _pair(v["env"], v["bare"]) for k, v in out.items()},
        "notes": "microseconds per call; ratio = env step / bare engine function (wrapper overhead factor)",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300, help="number of goals (episodes) timed")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "envs_webshop.json")
    args = ap.parse_args()
    result = run(args.n)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    for name, row in result["steps"].items():
        print(f"{name:12s} env {row['env']['median_us']:9.1f} us   bare {row['bare']['median_us']:9.1f} us   "
              f"x{row['ratio_median']}")
    print(f"reset        {result['reset']['median_us']:9.1f} us   one-time: {result['one_time_s']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

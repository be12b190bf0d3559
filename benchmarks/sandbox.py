"""Sandbox cost: per-execution latency of the bwrap backend vs a bare subprocess (ratio), and
throughput of HumanEval check programs with N concurrent slots. Writes
``benchmarks/results/sandbox.json``.

Usage: ``python benchmarks/sandbox.py [--reps 40] [--slots 1 2 4] [--tasks 40]``.

Latency: the same payloads (``/bin/true``; ``python3`` printing one line) run ``--reps`` times,
interleaved (bare, sandbox, bare, …) so machine load affects both alike; medians and p90 in
milliseconds (wall time: the sandbox's processes are reaped inside its pid namespaces, so
child-CPU accounting would under-count them). The bare baseline is ``subprocess.run`` of the same interpreter with
captured output, no isolation. Throughput: the canonical solutions of the first ``--tasks``
HumanEval problems, checked by ``--slots`` threads sharing one ``BwrapSandbox(slots=N)``.
On a shared machine read ``loadavg`` alongside the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from agentrl_sandboxes.bwrap import BwrapSandbox

OUT = Path(__file__).parent / "results" / "sandbox.json"


def _stats(xs: list[float]) -> dict:
    xs = sorted(xs)
    return {"median_ms": round(statistics.median(xs) * 1e3, 2), "p90_ms": round(xs[int(0.9 * (len(xs) - 1))] * 1e3, 2)}


def _timed(fn) -> float:
    """Wall seconds of one call."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def latency(sb: BwrapSandbox, reps: int) -> dict:
    """Interleaved bare-vs-sandbox timings of ``/bin/true`` and a one-line Python program."""
    py = sb.python.executable
    with tempfile.TemporaryDirectory(prefix="agentrl-bench-") as work:
        return _latency_in(sb, reps, py, work)


def _latency_in(sb: BwrapSandbox, reps: int, py: str, work: str) -> dict:
    with open(os.path.join(work, "main.py"), "w") as fh:
        fh.write("print('hello')\n")
    cases = {
        "true": (lambda: subprocess.run(["/bin/true"], capture_output=True),
                 lambda: sb.run(["/bin/true"])),
        "python_print": (lambda: subprocess.run([py, "-u", "-B", "-s", "main.py"], capture_output=True, cwd=work),
                         lambda: sb.run(code="print('hello')\n")),
    }
    out = {}
    for name, (bare, boxed) in cases.items():
        b, s = [], []
        for _ in range(reps):
            b.append(_timed(bare))
            s.append(_timed(boxed))
        bs, ss = _stats(b), _stats(s)
        out[name] = {"bare": bs, "sandbox": ss, "ratio_median": round(ss["median_ms"] / bs["median_ms"], 2),
                     "overhead_median_ms": round(ss["median_ms"] - bs["median_ms"], 2)}
    return out


def throughput(slots: int, n_tasks: int) -> dict:
    """HumanEval canonical checks per second with ``slots`` concurrent runs."""
    from agentrl_envs.code.tasks import check_program, load_humaneval

    tasks = load_humaneval()[:n_tasks]
    programs = [check_program(t, t.canonical_solution) for t in tasks]
    sb = BwrapSandbox(slots=slots)
    try:
        start = time.perf_counter()
        with ThreadPoolExecutor(slots) as pool:
            results = list(pool.map(lambda p: sb.run(code=p, timeout_s=20), programs))
        wall = time.perf_counter() - start
    finally:
        sb.close()
    return {"slots": slots, "runs": len(programs), "passed": sum(r.ok for r in results), "wall_s": round(wall, 3),
            "runs_per_s": round(len(programs) / wall, 2)}


def main() -> None:
    """Parse arguments, measure, print and write the JSON result."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--slots", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--tasks", type=int, default=40)
    args = ap.parse_args()
    sb = BwrapSandbox(slots=1)
    try:
        lat = latency(sb, args.reps)
    finally:
        sb.close()
    thr = [throughput(n, args.tasks) for n in args.slots]
    result = {
        "benchmark": "sandbox", "backend": "bwrap", "python": sb.python.executable, "reps": args.reps,
        "latency": lat, "throughput": thr, "cpus": os.cpu_count(), "loadavg": list(os.getloadavg()),
        "platform": platform.platform(), "unix_time": int(time.time()),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

"""Benchmark the credit estimators: vectorised vs the naive dict-of-lists reference.

Table: ``--groups`` task groups × ``--episodes`` rollouts × ~``--turns`` turns (default
1,000 × 8 × ~12 ≈ 100k turns) with realistic anchor repetition: each group has a small
state space walked with a forward bias, loops, a shared ``"Nothing happens."`` anchor,
~50 % success (reward 10 on the last turn), ~5 % invalid actions, 64-d hidden states
close for equal anchors, critic values, RTPO branch ids and Tree-GRPO chains.

For each registered estimator: wall time (best of ``--repeat``) and peak traced memory
(tracemalloc, MiB) of the vectorised estimator, the same for the naive reference
(``tests/credit/credit_reference.py``, one run) and their ratio, plus a linearity check
(CPU time at N/4, N/2, N, 2N), and the
machine's load average (the machine is shared; compare CPU seconds). Output: JSON to ``benchmarks/results/credit.json``.

BLAS is pinned to one thread (``OPENBLAS_NUM_THREADS=1`` unless set), as a trainer on a
shared CPU should do too. Usage: ``python benchmarks/credit.py [--groups 1000] [--skip-naive] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import tracemalloc
from pathlib import Path

# One BLAS thread (set before NumPy loads): the BiPACE cosine blocks are small, and
# multi-threaded BLAS on a shared 2-core machine spins instead of working.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "credit"))

from credit_reference import REFERENCE  # noqa: E402

from agentrl.credit import compute_advantages, list_estimators  # noqa: E402
from agentrl.types import TurnTable  # noqa: E402

HIDDEN = 64
N_STATES = 16


def realistic_table(n_groups: int, n_eps: int = 8, turns: int = 12, seed: int = 0) -> TurnTable:
    """A synthetic ALFWorld-like batch (see module docstring); rows shuffled."""
    rng = np.random.default_rng(seed)
    n_ep = n_groups * n_eps
    length = np.clip(rng.poisson(turns, n_ep), 2, 3 * turns)
    ep = np.repeat(np.arange(n_ep), length)
    n = ep.size
    start = np.concatenate([[0], np.cumsum(length)[:-1]])
    t = np.arange(n) - np.repeat(start, length)
    group = ep // n_eps
    step = rng.choice([0, 1, 1, 1, 2, -1], size=n)                 # forward bias, some loops back
    state = np.zeros(n, np.int64)
    for k in range(int(length.max())):                             # walk per turn level (vectorised)
        at = t == k
        state[at] = 0 if k == 0 else np.clip(state[np.flatnonzero(at) - 1] + step[at], 0, N_STATES - 2)
    nothing = rng.random(n) < 0.08
    anchor = np.where(nothing, N_STATES - 1, state) + N_STATES * group
    last = np.append(ep[1:] != ep[:-1], True)
    success = rng.random(n_ep) < 0.5
    reward = np.where(last & success[ep], 10.0, 0.0)
    nxt = np.append(anchor[1:], 0)
    nxt = np.where(last, anchor, nxt)
    centers = rng.normal(size=(N_STATES * n_groups, HIDDEN))
    hidden = centers[anchor] + 0.02 * rng.normal(size=(n, HIDDEN))
    row = np.arange(n)
    parent = np.where(t > 0, row - 1, -1)
    perm = rng.permutation(n)
    inv = np.empty(n, np.int64)
    inv[perm] = row
    par = parent[perm]
    return TurnTable(
        group=group[perm], episode=ep[perm], t=t[perm], reward=reward[perm],
        terminated=(last & success[ep])[perm], truncated=(last & ~success[ep])[perm],
        action_valid=(rng.random(n) > 0.05)[perm], anchor_key=anchor[perm], next_anchor_key=nxt[perm],
        action_key=rng.integers(0, 6, n)[perm], parent=np.where(par >= 0, inv[np.maximum(par, 0)], -1),
        episode_ok=np.ones(n, bool), trainable=np.ones(n, bool), turn_id=perm, hidden=hidden[perm],
        value=rng.normal(size=n), bootstrap_value=np.where(last & ~success[ep], 1.0, 0.0)[perm],
        tree=ep[perm], branch=np.where(t % 2 == 0, group * 64 + t, -1)[perm],
        anchor_vocab=tuple(f"obs {i}" for i in range(int(max(anchor.max(), nxt.max())) + 1)),
    )


def measure(fn, repeat: int) -> tuple[float, float, float]:
    """(best wall seconds, best process-CPU seconds over ``repeat`` runs, peak traced MiB
    of one run). CPU time is the fair number on a shared machine (one thread)."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return wall, cpu, peak


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-naive", action="store_true")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "credit.json")
    args = ap.parse_args()
    table = realistic_table(args.groups)
    sizes = {f: realistic_table(max(1, int(args.groups * f)), seed=1) for f in (0.25, 0.5, 1.0, 2.0)}
    results = {}
    for name in list_estimators():
        fast_s, fast_cpu, fast_mib = measure(lambda: compute_advantages(table, name), args.repeat)
        entry = {"vectorised_wall_s": round(fast_s, 4), "vectorised_cpu_s": round(fast_cpu, 4),
                 "vectorised_peak_mib": round(fast_mib, 1)}
        entry["scaling_cpu_s_by_n"] = {
            str(len(tb)): round(measure(lambda: compute_advantages(tb, name), 2)[1], 4) for tb in sizes.values()
        }
        if not args.skip_naive:
            ref, kept = REFERENCE[name], []
            naive_s, naive_cpu, naive_mib = measure(lambda: kept.append(ref(table)), 1)
            entry.update(naive_wall_s=round(naive_s, 3), naive_cpu_s=round(naive_cpu, 3),
                         naive_peak_mib=round(naive_mib, 1), cpu_speedup=round(naive_cpu / fast_cpu, 1))
            np.testing.assert_allclose(compute_advantages(table, name), kept[0], atol=1e-9, rtol=1e-9)
        results[name] = entry
        print(name, json.dumps(entry), flush=True)
    report = {
        "n_turns": len(table), "groups": args.groups, "episodes_per_group": 8, "hidden_dim": HIDDEN,
        "python": platform.python_version(), "numpy": np.__version__, "machine": platform.machine(),
        "goal_s_per_estimator": 0.5, "load_average": os.getloadavg(),
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"), "estimators": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

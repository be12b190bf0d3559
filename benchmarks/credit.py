"""Benchmark the credit estimators at real sizes (issue 22): every registered estimator at ~100k
and ~400k turns, the 400k/100k ratio (linearity), and identical results to the old code.

Tables: ``--groups`` task groups × 8 rollouts × ~12 turns (default 1,000 groups ≈ 96k turns,
and 4× that) with realistic anchor repetition: each group has a small state space walked with
a forward bias, loops, a shared ``"Nothing happens."`` anchor, ~50 % success (reward 10 on the
last turn), ~5 % invalid actions, hidden states close for equal anchors, critic values, RTPO
branch ids, Tree-GRPO chains and BEACON milestones (~15 % of turns and every winning one; 4 per task),
3SPO's prior per-state statistics, HiPER's switch / subgoal tags and three critic values, OPRL's
PRM log-ratios and StepOPSD's token gaps;
anchors are ALFWorld-like observation texts ("You arrive at
cabinet 3. On the cabinet 3, you see a mug 1, and a spoon 2."; near-duplicates included).

Variants: each estimator with its defaults; GiGPO and GraphGPO also with ``enable_similarity``
(thresh 0.95); BiPACE at hidden sizes 64 / 1536 / 3584 (float64 states, as the store gives
them; 400k only up to ``--max-hidden-400k``, 1536 by default: 3584 would need 11 GiB).

Per variant and size: best-of-``--repeat`` process-CPU seconds (the fair number on a shared
machine; one BLAS thread) and wall seconds, the two sizes taking turns run by run. Checks, each an ``np.array_equal`` unless said:

* ``identical_to_old_code``: BiPACE against the exact cosine block test it screens
  (``agentrl.credit._cosine.cosine_edges``, the code before issue 22); similarity variants against
  the plain difflib loop (``tests/credit/credit_reference.similarity_clusters``, 100k only).
* ``identical_to_saved``: against arrays saved by an earlier run (``--save DIR`` with the old
  code on ``PYTHONPATH``, then ``--check DIR``).
* ``matches_naive``: the naive dict-of-lists reference (``tests/credit/credit_reference.py``),
  100k, default variants at hidden 64, ``allclose`` at 1e-9; with its CPU seconds.

Output: JSON to ``benchmarks/results/credit.json`` with the load average before and after.
Usage: ``python benchmarks/credit.py [--groups 1000] [--repeat 3] [--skip-naive] [--skip-plain]
[--save DIR | --check DIR] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import sys
import time
from pathlib import Path

# One BLAS thread (set before NumPy loads), as a trainer on a shared CPU should do too.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "credit"))

import agentrl.credit._similarity as sim  # noqa: E402
from credit_reference import REFERENCE  # noqa: E402
from credit_reference import similarity_clusters as plain_clusters  # noqa: E402

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
    valid, action, value = rng.random(n) > 0.05, rng.integers(0, 6, n), rng.normal(size=n)  # drawn in the old order
    # BEACON (§15.2), drawn after every other column: ~15 % of turns complete a milestone, every winning
    # turn does; ALFWorld-like walkthroughs of 4 milestones (the −1 tail rule applies to some episodes)
    milestone = (last & success[ep]) | (rng.random(n) < 0.15)
    return TurnTable(
        group=group[perm], episode=ep[perm], t=t[perm], reward=reward[perm],
        terminated=(last & success[ep])[perm], truncated=(last & ~success[ep])[perm],
        action_valid=valid[perm], anchor_key=anchor[perm], next_anchor_key=nxt[perm],
        action_key=action[perm], parent=np.where(par >= 0, inv[np.maximum(par, 0)], -1),
        episode_ok=np.ones(n, bool), trainable=np.ones(n, bool), turn_id=perm, hidden=hidden[perm],
        value=value, bootstrap_value=np.where(last & ~success[ep], 1.0, 0.0)[perm],
        tree=ep[perm], branch=np.where(t % 2 == 0, group * 64 + t, -1)[perm],
        milestone=milestone[perm], n_milestones=np.full(n, 4),
        anchor_vocab=tuple(f"obs {i}" for i in range(int(max(anchor.max(), nxt.max())) + 1)),
        state_stats=prior_state_stats(anchor[perm], nxt[perm], seed),
        **hiper_columns(t[perm], seed),
        scores=score_columns(n, seed),
    )


def score_columns(n: int, seed: int, max_tokens: int = 8) -> dict[str, np.ndarray]:
    """The step scorers' columns (§17.3, §18.3) for ``n`` rows: OPRL's ``prm_logratio`` (float64[N], nats) and
    StepOPSD's ``gap`` (float64[N, 8]: 1..8 scored action tokens per turn, NaN-padded, a fifth of the turns not
    scored); own generator, so the other columns stay as before."""
    rng = np.random.default_rng(seed + 3)
    gap = rng.normal(scale=0.5, size=(n, max_tokens))
    width = np.where(rng.random(n) < 0.2, 0, rng.integers(1, max_tokens + 1, n))
    gap[np.arange(max_tokens)[None, :] >= width[:, None]] = np.nan
    return {"prm_logratio": rng.normal(scale=3.0, size=n), "gap": gap}


def hiper_columns(t: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """HiPER's inputs (§14.2) for rows with turn indices ``t``: ~30 % SWITCH turns (segments of ~3
    turns), 3 % without a switch tag, a subgoal per row from 6 texts (5 % missing), three critic
    values; own generator, so the other columns stay as before."""
    rng = np.random.default_rng(seed + 2)
    n = t.size
    switch = (rng.random(n) < 0.3) & (t > 0)
    sub = np.where(rng.random(n) < 0.05, -1, rng.integers(0, 6, n))
    return {"switch": switch, "has_switch": rng.random(n) > 0.03, "subgoal_key": sub,
            "value_low": rng.normal(size=n), "value_high": rng.normal(size=n), "value_term": rng.normal(size=n)}


def prior_state_stats(anchor: np.ndarray, nxt: np.ndarray, seed: int) -> np.ndarray:
    """3SPO's ``state_stats`` (int64[N, 5]) as after ~40 earlier iterations of 8 rollouts per task:
    per anchor N in 0..320 (a fifth unseen), N_s ≤ N, t = 1 + 40·8·groups; own generator, so the
    other columns stay as before."""
    rng = np.random.default_rng(seed + 1)
    m = int(max(anchor.max(), nxt.max())) + 1
    n = rng.integers(0, 321, m) * (rng.random(m) > 0.2)
    ns = (rng.random(m) * rng.random(m) * (n + 1)).astype(np.int64)
    t = 1 + 320 * (m // N_STATES + 1)
    return np.stack([n[anchor], ns[anchor], n[nxt], ns[nxt], np.full(anchor.size, t)], axis=1)


LOCS = ["cabinet", "countertop", "drawer", "shelf", "sinkbasin", "fridge", "microwave", "stoveburner", "desk", "bed"]
OBJS = ["mug", "apple", "knife", "spoon", "bowl", "plate", "cup", "lettuce", "tomato", "bread", "pen", "book"]


def observation_texts(n: int, seed: int = 0) -> tuple[str, ...]:
    """``n`` ALFWorld-like observations; every fourth one a one-digit variant of the previous."""
    rng = np.random.default_rng(seed)
    out: list[str] = []
    while len(out) < n:
        loc, k = LOCS[rng.integers(len(LOCS))], rng.integers(1, 6)
        objs = [f"a {OBJS[rng.integers(len(OBJS))]} {rng.integers(1, 4)}" for _ in range(rng.integers(1, 5))]
        seen = ", ".join(objs[:-1]) + (", and " if len(objs) > 1 else "") + objs[-1]
        text = f"You arrive at {loc} {k}. On the {loc} {k}, you see {seen}."
        out += [text] if len(out) % 4 else [text, text.replace(" 1", " 2", 1)]
    return tuple(out[:n])


SIMILARITY = {"enable_similarity": True, "similarity_thresh": 0.95}
GOALS = {"similarity": 1.0, "bipace/h1536": 0.5, "bipace/h3584": None}  # CPU s at 100k; others 0.2 (issue 22)


def with_hidden(tb: TurnTable, h: int, seed: int = 0) -> TurnTable:
    """``tb`` with float64[N, h] states: one random centre per anchor plus 2 % noise (filled in chunks)."""
    if h == HIDDEN:
        return tb
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(int(tb.anchor_key.max()) + 1, h))
    hidden = np.empty((len(tb), h))
    for s in range(0, len(tb), 1 << 15):
        e = min(s + (1 << 15), len(tb))
        hidden[s:e] = centers[tb.anchor_key[s:e]] + 0.02 * rng.normal(size=(e - s, h))
    return dataclasses.replace(tb, hidden=hidden)


def variants() -> list[tuple[str, str, dict, int]]:
    """(label, estimator, kwargs, hidden size) for every registered estimator."""
    out = []
    for name in list_estimators():
        sizes = (64, 1536, 3584) if name == "bipace" else (HIDDEN,)
        out += [(f"{name}/h{h}" if name == "bipace" else name, name, {}, h) for h in sizes]
        if name in ("gigpo", "graphgpo"):
            out.append((f"{name}/similarity", name, SIMILARITY, HIDDEN))
    return out


@contextlib.contextmanager
def old_code(name: str, kw: dict):
    """The implementation before issue 22's speed-ups, where there was one; yields False if none."""
    import agentrl.credit.bipace as bp
    mods = [sys.modules[m] for m in ("agentrl.credit.gigpo", "agentrl.credit.graphgpo")]
    if name == "bipace" and hasattr(bp, "screened_edges"):
        from agentrl.credit._cosine import cosine_edges
        fast, bp.screened_edges = bp.screened_edges, lambda h, s, g, r, tau, anchor=None: cosine_edges(h, s, g, r, tau)
        try:
            yield True
        finally:
            bp.screened_edges = fast
    elif kw.get("enable_similarity"):
        fast = sim.similarity_clusters
        for m in mods:
            m.similarity_clusters = plain_clusters
        try:
            yield True
        finally:
            for m in mods:
                m.similarity_clusters = fast
    else:
        yield False


def measure(fn, repeat: int) -> tuple[float, float, np.ndarray]:
    """(best process-CPU seconds, best wall seconds, the result) over ``repeat`` runs."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return cpu, wall, out


def timed(name: str, kw: dict, tables: dict[str, TurnTable], repeat: int) -> tuple[dict, dict]:
    """Best CPU / wall seconds per size and the results, the sizes taking turns ``repeat`` times
    (so a change of machine load hits both sides of the 400k/100k ratio alike)."""
    best = {size: [float("inf"), float("inf")] for size in tables}
    out = {}
    for _ in range(repeat):
        for size, tb in tables.items():
            cpu, wall, out[size] = measure(lambda: compute_advantages(tb, name, **kw), 1)
            best[size] = [min(best[size][0], cpu), min(best[size][1], wall)]
    return {size: {"cpu_s": round(c, 4), "wall_s": round(w, 4)} for size, (c, w) in best.items()}, out


def checks(label: str, name: str, kw: dict, tb: TurnTable, size: str, adv: np.ndarray, entry: dict, args) -> None:
    """Add every check that applies to ``entry`` (one variant at one size)."""
    key = f"{label.replace('/', '_')}_{size}.npy"
    if args.save:
        np.save(args.save / key, adv)
    if args.check:
        entry["identical_to_saved"] = bool(np.array_equal(np.load(args.check / key), adv))
    if not (kw.get("enable_similarity") and (args.skip_plain or size != "100k")):
        with old_code(name, kw) as there:
            if there:
                old_cpu, _, old = measure(lambda: compute_advantages(tb, name, **kw), 1)
                entry.update(old_cpu_s=round(old_cpu, 3), identical_to_old_code=bool(np.array_equal(old, adv)))
    if size == "100k" and not args.skip_naive and not kw and tb.hidden.shape[1] == HIDDEN:
        ref, kept = REFERENCE[name], []
        entry["naive_cpu_s"] = round(measure(lambda: kept.append(ref(tb)), 1)[0], 3)
        entry["matches_naive"] = bool(np.allclose(adv, kept[0], atol=1e-9, rtol=1e-9))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-naive", action="store_true", help="skip the naive dict-of-lists references")
    ap.add_argument("--skip-plain", action="store_true", help="skip the slow plain-difflib similarity loop")
    ap.add_argument("--max-hidden-400k", type=int, default=1536)
    ap.add_argument("--only", default="", help="comma-separated labels to run (default: all)")
    ap.add_argument("--save", type=Path, help="save each result as DIR/<label>_<size>.npy")
    ap.add_argument("--check", type=Path, help="compare each result with DIR/<label>_<size>.npy")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "credit.json")
    args = ap.parse_args()
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()
    base = {}
    for size, groups in (("100k", args.groups), ("400k", 4 * args.groups)):
        tb = realistic_table(groups)
        base[size] = dataclasses.replace(tb, anchor_vocab=observation_texts(len(tb.anchor_vocab)))
    only = set(filter(None, args.only.split(",")))
    rows: dict = {}
    for label, name, kw, h in variants():
        if only and label not in only:
            continue
        tables = {size: with_hidden(tb0, h) for size, tb0 in base.items()
                  if size == "100k" or h <= args.max_hidden_400k}
        row, results = timed(name, kw, tables, args.repeat)
        for size, tb in tables.items():
            checks(label, name, kw, tb, size, results[size], row[size], args)
        if "400k" not in tables:
            row["400k"] = {"skipped": f"hidden {h} at 400k needs {len(base['400k']) * h * 8 / 2**30:.1f} GiB"}
        del tables, results
        if "cpu_s" in row.get("400k", {}):
            row["cpu_ratio_400k_100k"] = round(row["400k"]["cpu_s"] / row["100k"]["cpu_s"], 2)
        goal = GOALS.get("similarity" if kw.get("enable_similarity") else label, 0.2)
        row["goal_cpu_s_100k"], row["meets_goal"] = goal, None if goal is None else row["100k"]["cpu_s"] <= goal
        rows[label] = row
        print(label, json.dumps(row), flush=True)
    n100, n400 = len(base["100k"]), len(base["400k"])
    report = {
        "n_turns": {"100k": n100, "400k": n400}, "turn_ratio_400k_100k": round(n400 / n100, 2),
        "groups": args.groups, "episodes_per_group": 8, "repeat": args.repeat, "python": platform.python_version(),
        "numpy": np.__version__, "machine": platform.machine(), "cpus": os.cpu_count(),
        "rapidfuzz": sim._Indel is not None, "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "omp_threads": os.environ.get("OMP_NUM_THREADS"), "load_average_start": load_start,
        "load_average_end": os.getloadavg(), "variants": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Credit at real sizes (issue 22): fuzzy anchor grouping and BiPACE's hidden size.

Side by side in one run, on ``credit.realistic_table`` (1,000 groups × 8 episodes × ~12 turns
≈ 96k turns, and 4× that) with ALFWorld-like observation texts as anchors ("You arrive at
cabinet 3. On the cabinet 3, you see a mug 1, and a spoon 2."; near-duplicates included):

* GiGPO and GraphGPO with ``enable_similarity`` (thresh 0.95): the shipped clustering
  (rapidfuzz LCS bound, and difflib's quick-ratio bounds when rapidfuzz is absent) against the
  plain difflib loop it replaced; the advantages must be identical (asserted), and their CPU
  seconds at 100k and 400k turns give the ratio and the linearity.
* BiPACE at hidden sizes 64 / 1536 / 3584 (float64 states, as the store gives them).

CPU seconds (one BLAS thread) and the load average are written: the machine is shared.
Usage: ``python benchmarks/credit_sizes.py [--groups 1000] [--skip-plain] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import agentrl.credit._similarity as sim  # noqa: E402
from agentrl.credit import compute_advantages  # noqa: E402
from credit import realistic_table  # noqa: E402  (puts tests/credit on sys.path)
from credit_reference import similarity_clusters as plain_clusters  # noqa: E402

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


def cpu(fn) -> tuple[float, object]:
    c0 = time.process_time()
    out = fn()
    return time.process_time() - c0, out


def similarity_rows(tables: dict[str, object], skip_plain: bool) -> dict:
    rows = {}
    fast, indel = sim.similarity_clusters, sim._Indel
    for name in ("gigpo", "graphgpo"):
        for size, tb in tables.items():
            run = lambda: compute_advantages(tb, name, enable_similarity=True, similarity_thresh=0.95)  # noqa: E731
            entry = {}
            entry["shipped_cpu_s"], want = cpu(run)
            sim._Indel = None
            entry["difflib_bounds_cpu_s"], got = cpu(run)
            sim._Indel = indel
            assert np.array_equal(got, want), "difflib-bound path differs"
            if not skip_plain and size == "100k":
                sim.similarity_clusters = plain_clusters
                for mod in ("agentrl.credit.gigpo", "agentrl.credit.graphgpo"):
                    sys.modules[mod].similarity_clusters = plain_clusters
                entry["plain_cpu_s"], ref = cpu(run)
                sim.similarity_clusters = fast
                for mod in ("agentrl.credit.gigpo", "agentrl.credit.graphgpo"):
                    sys.modules[mod].similarity_clusters = fast
                assert np.array_equal(ref, want), "shipped clustering differs from the plain loop"
                entry["identical_to_plain"] = True
                entry["speedup"] = round(entry["plain_cpu_s"] / entry["shipped_cpu_s"], 1)
            entry["off_cpu_s"], _ = cpu(lambda: compute_advantages(tb, name))
            rows[f"{name}/{size}"] = {k: round(v, 3) if isinstance(v, float) else v for k, v in entry.items()}
            print(name, size, json.dumps(rows[f"{name}/{size}"]), flush=True)
    return rows


def bipace_rows(tb) -> dict:
    rows = {}
    rng = np.random.default_rng(0)
    for h in (64, 1536, 3584):
        centers = rng.normal(size=(int(tb.anchor_key.max()) + 1, h))
        table = dataclasses.replace(tb, hidden=centers[tb.anchor_key] + 0.02 * rng.normal(size=(len(tb), h)))
        best = min(cpu(lambda: compute_advantages(table, "bipace"))[0] for _ in range(2))
        rows[f"bipace/h{h}"] = {"cpu_s": round(best, 3), "hidden_mib": round(table.hidden.nbytes / 2**20)}
        print("bipace", h, json.dumps(rows[f"bipace/h{h}"]), flush=True)
        del table, centers
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--skip-plain", action="store_true", help="skip the slow plain-difflib reference")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "credit_sizes.json")
    args = ap.parse_args()
    tables = {}
    for size, groups in (("100k", args.groups), ("400k", 4 * args.groups)):
        tb = realistic_table(groups)
        tables[size] = dataclasses.replace(tb, anchor_vocab=observation_texts(len(tb.anchor_vocab)))
    report = {"n_turns": {k: len(v) for k, v in tables.items()}, "similarity_thresh": 0.95,
              "rapidfuzz": sim._Indel is not None, "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
              "load_average_start": os.getloadavg()}
    report["similarity"] = similarity_rows(tables, args.skip_plain)
    report["bipace"] = bipace_rows(tables["100k"])
    report["load_average_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

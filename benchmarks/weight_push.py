"""Trainer → engine-worker weight push: the broadcast group (``agentrl.llm.weight_broadcast``,
issue 37) against the shared-memory buffer it replaced (``agentrl.llm.weight_sync.SharedWeights``).

A synthetic fp32 state dict of SmolLM2-135M's size (``--mb``, default 621 MB, in 4 MiB-ish
tensors) is pushed to ``--engines`` receiver processes (default 2), each loading it into its own
copy (the ``copy_`` an engine's ``update_weights`` does). One push = trainer write/broadcast +
every receiver loaded and acknowledged. Median of ``--repeats`` pushes after one warm-up.
Ratios come from one run, side by side; absolute seconds depend on the machine and its load.

Usage: ``python benchmarks/weight_push.py [--mb 621] [--engines 2] [--repeats 3]
[--out benchmarks/results/weight_push.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from agentrl.llm.weight_broadcast import WeightLayout, WeightReceiver, WeightSender
from agentrl.llm.weight_sync import SharedWeights, spawn_context


class _Copy:
    """Stand-in engine: its own weights, loaded by ``copy_``."""

    def __init__(self, like: dict) -> None:
        self.w = {k: torch.empty_like(v) for k, v in like.items()}
        self.policy_version = -1

    def update_weights(self, state, version):
        with torch.no_grad():
            for k, v in state.items():
                self.w[k].copy_(v)
        self.policy_version = version


def _state(mb: float) -> dict:
    n = max(1, int(mb * (1 << 20) / (4 << 20)))
    return {f"layer{i}.weight": torch.randn(1024, 1024) for i in range(n)}


def _shared_child(conn, shared) -> None:
    torch.set_num_threads(1)
    eng = _Copy(shared.tensors)
    conn.send("ready")
    while (v := conn.recv()) is not None:
        conn.send(shared.load_into(eng) == v)


def _bcast_child(conn, address, rank, layout) -> None:
    torch.set_num_threads(1)
    recv = WeightReceiver(address, rank, layout)
    eng = None
    conn.send("ready")
    while (v := conn.recv()) is not None:
        recv.wait(v, timeout_s=600)
        eng = eng or _Copy({n: torch.empty(s, dtype=getattr(torch, d))
                            for n, s, d in zip(layout.names, layout.shapes, layout.dtypes)})
        conn.send(recv.load_into(eng) == v)
    recv.close()


def _measure(push, conns, repeats: int) -> list[float]:
    out = []
    for v in range(1, repeats + 2):
        t0 = time.perf_counter()
        push(v)
        for c in conns:
            c.send(v)
        assert all(c.recv() for c in conns)
        out.append(time.perf_counter() - t0)
    return out[1:]  # warm-up excluded


def run(mb: float, engines: int, repeats: int) -> dict:
    torch.set_num_threads(1)
    ctx, state = spawn_context(), _state(mb)
    nbytes = sum(t.numel() * t.element_size() for t in state.values())
    res = {"bytes": nbytes, "engines": engines, "repeats": repeats}
    # shared memory (the old transport): write the buffer in place, every worker loads it
    shared = SharedWeights(state, 0)
    pipes = [ctx.Pipe() for _ in range(engines)]
    procs = [ctx.Process(target=_shared_child, args=(b, shared)) for _, b in pipes]
    for p in procs:
        p.start()
    assert all(a.recv() == "ready" for a, _ in pipes)
    res["shared_memory_s"] = _measure(lambda v: shared.publish(state, v), [a for a, _ in pipes], repeats)
    for a, _ in pipes:
        a.send(None)
    for p in procs:
        p.join()
    # the broadcast group (gloo on CPU), 512 MiB buckets as policy.vllm.weight_bucket_mb
    layout = WeightLayout.of(state, 512 << 20)
    sender = WeightSender(layout, engines)
    address = sender.open()
    pipes = [ctx.Pipe() for _ in range(engines)]
    procs = [ctx.Process(target=_bcast_child, args=(b, address, k + 1, layout)) for k, (_, b) in enumerate(pipes)]
    for p in procs:
        p.start()
    sender.form()
    assert all(a.recv() == "ready" for a, _ in pipes)
    res["broadcast_s"] = _measure(lambda v: sender.push(state, v), [a for a, _ in pipes], repeats)
    for a, _ in pipes:
        a.send(None)
    sender.close()
    for p in procs:
        p.join()
    for key in ("shared_memory", "broadcast"):
        med = statistics.median(res[f"{key}_s"])
        res[f"{key}_median_s"] = med
        res[f"{key}_GBps"] = nbytes / med / 1e9  # state bytes delivered to every engine per second
    res["broadcast_vs_shared"] = res["shared_memory_median_s"] / res["broadcast_median_s"]
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=621.0)
    ap.add_argument("--engines", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="benchmarks/results/weight_push.json")
    args = ap.parse_args()
    load0 = os.getloadavg()
    res = run(args.mb, args.engines, args.repeats)
    res.update(date=time.strftime("%Y-%m-%d"), torch=torch.__version__, machine=platform.machine(),
               cpus=os.cpu_count(), load_before=load0, load_after=os.getloadavg())
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps({k: v for k, v in res.items() if not k.endswith("_s")}, indent=2))


if __name__ == "__main__":
    main()

"""Trainer → engine-worker weight push on one host, every transport side by side (issues 37, 52).

- ``old``: the shared-memory push as it was before issue 37 (``SharedWeights`` written in place,
  each receiver process ``copy_``-loads it into its own copy: ``_shared_child``);
- ``shared_memory``, ``auto``, ``broadcast``: ``ProcessEngineWorkers.push_weights`` with
  ``rollout.weight_transport`` set so — real engine workers (HF, the model of ``--model``,
  default the packaged SmolLM2-135M-Instruct in fp32, 540 MB) that load each version into their
  engine and acknowledge; ``broadcast`` is the group, bound to loopback, keyed and signed.

The state pushed is the model's own inference state (the ``old`` receivers load the same bytes).
One push = trainer publish/broadcast + every receiver loaded and acknowledged. Each repeat
pushes once per mode, the modes' order rotating from repeat to repeat (interleaved: a load
spike hits every mode alike); one warm-up push per mode first; medians of ``--repeats``.
``ss -ltnp`` is captured during a push of each mode: the run's listening sockets (all loopback;
none for shared memory). Ratios come from one run; absolute seconds depend on the machine's load.

Usage: ``python benchmarks/weight_push.py [--model smollm2] [--engines 2] [--repeats 5]
[--out benchmarks/results/weight_push.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import threading
import time
from pathlib import Path

import torch

from agentrl.llm.weight_sync import SharedWeights, spawn_context


class _Copy:
    """Stand-in engine of the ``old`` receivers: its own weights, loaded by ``copy_``."""

    def __init__(self, like: dict) -> None:
        self.w = {k: torch.empty_like(v) for k, v in like.items()}
        self.policy_version = -1

    def update_weights(self, state, version):
        with torch.no_grad():
            for k, v in state.items():
                self.w[k].copy_(v)
        self.policy_version = version


def _shared_child(conn, shared) -> None:
    torch.set_num_threads(1)
    eng = _Copy(shared.tensors)
    conn.send("ready")
    while (v := conn.recv()) is not None:
        conn.send(shared.load_into(eng) == v)


MODES = ("old", "shared_memory", "auto", "broadcast")


def _ss(pids: list[int]) -> list[str]:
    """The lines of ``ss -ltnp`` that name one of ``pids`` (this run's listening sockets)."""
    try:
        out = subprocess.run(["ss", "-ltnp"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ["ss not available"]
    return [" ".join(line.split()) for line in out.splitlines() if any(f"pid={p}," in line for p in pids)]


class _Old:
    """The pre-issue-37 push: ``SharedWeights`` + receiver processes that copy-load it."""

    def __init__(self, state: dict, engines: int) -> None:
        ctx = spawn_context()
        self.shared, self.state = SharedWeights(state, 0), state
        self.pipes = [ctx.Pipe() for _ in range(engines)]
        self.procs = [ctx.Process(target=_shared_child, args=(b, self.shared)) for _, b in self.pipes]
        for p in self.procs:
            p.start()
        assert all(a.recv() == "ready" for a, _ in self.pipes)
        self.pids = [os.getpid(), *(p.pid for p in self.procs)]

    def push(self, v: int) -> None:
        self.shared.publish(self.state, v)
        for a, _ in self.pipes:
            a.send(v)
        assert all(a.recv() for a, _ in self.pipes)

    def close(self) -> None:
        for a, _ in self.pipes:
            a.send(None)
        for p in self.procs:
            p.join()


class _Workers:
    """``ProcessEngineWorkers`` on one transport."""

    def __init__(self, folder: str, state: dict, engines: int, transport: str) -> None:
        from agentrl.rollout.engines.interface import EngineSpec
        from agentrl.rollout.engines.procs import ProcessEngineWorkers

        self.state = state
        self.w = ProcessEngineWorkers(engines, EngineSpec(model=folder, num_threads=1), state, 0, transport=transport)
        self.pids = [os.getpid(), *self.w.pids()]

    def push(self, v: int) -> None:
        self.w.push_weights(self.state, v)

    def close(self) -> None:
        self.w.close()


def run(folder: str, engines: int, repeats: int) -> dict:
    from agentrl.llm.hf import HFEngine

    torch.set_num_threads(1)
    state = dict(HFEngine.from_pretrained(folder).model.state_dict())
    nbytes = sum({t.data_ptr(): t.numel() * t.element_size() for t in state.values()}.values())
    res: dict = {"model": folder, "bytes": nbytes, "engines": engines, "repeats": repeats, "ss_ltnp": {}}
    pushers: dict = {}
    times: dict[str, list[float]] = {m: [] for m in MODES}
    try:
        for m in MODES:  # start each mode and warm it up (`ss` captured during the push) before the next starts
            p = pushers[m] = _Old(state, engines) if m == "old" else _Workers(folder, state, engines, m)
            box: list = []
            t = threading.Thread(target=lambda: (time.sleep(0.05), box.append(_ss(p.pids))))
            t.start()
            p.push(1)
            t.join()
            res["ss_ltnp"][m] = box[0]
        for r in range(repeats):
            order = MODES[r % len(MODES):] + MODES[:r % len(MODES)]
            for m in order:
                t0 = time.perf_counter()
                pushers[m].push(r + 2)
                times[m].append(time.perf_counter() - t0)
    finally:
        for p in pushers.values():
            p.close()
    for m in MODES:
        res[f"{m}_s"] = times[m]
        res[f"{m}_median_s"] = statistics.median(times[m])
        res[f"{m}_GBps"] = nbytes / res[f"{m}_median_s"] / 1e9  # bytes delivered to every engine per second
    for m in MODES[1:]:
        res[f"{m}_vs_old"] = res["old_median_s"] / res[f"{m}_median_s"]  # speed relative to the old push
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2", help="a model folder or packaged model name")
    ap.add_argument("--engines", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="benchmarks/results/weight_push.json")
    args = ap.parse_args()
    load0 = os.getloadavg()
    from agentrl.llm.models import resolve_model

    res = run(str(resolve_model(args.model)), args.engines, args.repeats)
    res.update(date=time.strftime("%Y-%m-%d"), torch=torch.__version__, machine=platform.machine(),
               cpus=os.cpu_count(), load_before=load0, load_after=os.getloadavg())
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps({k: v for k, v in res.items() if not k.endswith("_s") and k != "ss_ltnp"}, indent=2))


if __name__ == "__main__":
    main()

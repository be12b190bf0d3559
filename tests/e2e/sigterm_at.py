"""``agentrl train CONFIG`` that sends itself SIGTERM at a named point of iteration 2 of an
asynchronous run (``rollout.max_staleness: 1``, one local engine worker, shared-memory weights,
at most one optimizer step per iteration) — tests/e2e/test_train_sigterm.py's matrix. Iteration 2
begins where the trainer takes its groups (``EngineStream.take``, 2nd call); the later points
are the first such call after iteration 2 stored its episodes.

Usage: ``python tests/e2e/sigterm_at.py POINT CONFIG`` with POINT one of ``POINTS``:

- ``rollout``: as the trainer takes iteration 2's groups from the stream (the worker is playing);
- ``between``: iteration 2's episodes stored, before its credit and update;
- ``update``: right after iteration 2's optimizer step, before its weight push;
- ``push``: halfway through writing iteration 2's weights into the shared buffers;
- ``checkpoint``: right after iteration 2's checkpoint is written.
"""

from __future__ import annotations

import os
import signal
import sys

POINTS = ("rollout", "between", "update", "push", "checkpoint")
ITERATION = 2
_calls: dict[str, int] = {}


def _term() -> None:
    """Say where (stderr), then SIGTERM this process: the handler raises in this (the main) thread."""
    print(f"[sigterm_at] SIGTERM after {_calls.get('store', 0)} stored iteration(s)", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)


def _second(name: str) -> bool:
    """Count a call of ``name``: True on the call of iteration 2."""
    _calls[name] = _calls.get(name, 0) + 1
    return _calls[name] == ITERATION


def _in_iteration_2(name: str) -> bool:
    """True on the first call of ``name`` after iteration 2 stored its episodes."""
    if _calls.get("store", 0) < ITERATION or _calls.get(name):
        return False
    _calls[name] = 1
    return True


def _hook(point: str) -> None:
    if point not in POINTS:
        raise SystemExit(f"unknown point {point!r}; choose one of {POINTS}")
    import torch

    import agentrl.train.loop as loop
    from agentrl.llm.weight_sync import SharedWeights
    from agentrl.rollout.engines.stream import EngineStream

    if point == "rollout":
        take = EngineStream.take

        def hooked_take(self, *a, **k):
            if _second("take"):
                _term()
            return take(self, *a, **k)

        EngineStream.take = hooked_take
    add_linked = loop.add_linked

    def hooked_add(*a, **k):
        out = add_linked(*a, **k)
        if _second("store") and point == "between":
            _term()
        return out

    loop.add_linked = hooked_add
    if point == "update":
        step = torch.optim.AdamW.step

        def hooked_step(self, *a, **k):
            out = step(self, *a, **k)
            if _in_iteration_2("step"):
                _term()
            return out

        torch.optim.AdamW.step = hooked_step
    elif point == "push":
        write = SharedWeights.write

        def hooked_write(self, state):
            if _in_iteration_2("write"):
                names = list(state)
                for name in names[: len(names) // 2]:  # half the new weights are in the buffers
                    self.tensors[name].copy_(state[name].detach())
                _term()
            return write(self, state)

        SharedWeights.write = hooked_write
    elif point == "checkpoint":
        save = loop.save_checkpoint

        def hooked_save(*a, **k):
            out = save(*a, **k)
            if _second("save"):
                _term()
            return out

        loop.save_checkpoint = hooked_save


if __name__ == "__main__":
    _hook(sys.argv[1])
    from agentrl.cli import main

    sys.exit(main(["train", sys.argv[2]]))

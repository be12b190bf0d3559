"""The engine and the trainer on one device: the engine sleeps through each update.

The colocate pattern of verl and SkyRL: before the update the loop puts the engine to sleep
(vLLM level 1: weights offloaded to host memory, KV cache discarded), so the trainer's
activations, gradients and optimizer state get the memory the engine held; after the update
the engine's weights come back for the weight sync (``sync_weights``), which leaves the KV
cache to be re-allocated last (the lowest peak: the new weights are loaded before the cache
returns)::

    with engine_asleep(policy.engine):
        stats = update_policy(...)        # sleep() on entry
    sync_weights(policy, ...)             # wake_up(("weights",)) on exit; the push wakes the KV cache

Engine-agnostic: an engine takes part through two optional methods, ``sleep()`` and
``wake_up(tags=None)`` (``tags`` among ``"weights"``, ``"kv_cache"``; None = everything).
Engines without them (the HF engine, whose model *is* the trainer's) and engines built
without sleep mode (vLLM on CPU) are untouched. If the update raises, the engine is woken
fully before the error propagates, so it can still sample, evaluate or be closed.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

__all__ = ["can_sleep", "engine_asleep"]


def can_sleep(engine) -> bool:
    """True when ``engine`` has both ``sleep`` and ``wake_up`` (it may still treat them as
    no-ops, e.g. a vLLM engine without sleep mode)."""
    return callable(getattr(engine, "sleep", None)) and callable(getattr(engine, "wake_up", None))


@contextmanager
def engine_asleep(engine) -> Iterator[None]:
    """Run the body (the policy update) with ``engine`` asleep; on a normal exit wake its
    weights only (``wake_up(tags=("weights",))``: the weight sync that follows loads into them
    and wakes the KV cache), on an exception wake everything (``wake_up()``).
    A no-op for an engine without ``sleep`` / ``wake_up`` (``can_sleep``)."""
    if not can_sleep(engine):
        yield
        return
    engine.sleep()
    try:
        yield
    except BaseException:
        engine.wake_up()
        raise
    engine.wake_up(tags=("weights",))

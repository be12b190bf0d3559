"""Slot bookkeeping shared by the env pools (``EnvPool``, ``agentrl.rollout.ray_backend.RayEnvPool``).

A pool has ``n`` slots, each running at most one episode. ``SlotBook`` validates calls and
remembers which slots lost their episode (env raised, hung, worker died) so that a later
``step`` on such a slot answers with an error result until the slot is reset. The pools only
differ in how they dispatch items to workers.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence


class SlotBook:
    """Validation and lost-episode state of ``n`` slots.

    Args:
        n: number of slots.
        owner: the pool's class name, used in error messages.
        error_result: builds the ``EnvResult`` returned for a slot without a running episode.
    """

    def __init__(self, n: int, owner: str, error_result: Callable[[str], object]) -> None:
        self.n, self.owner, self._error_result = n, owner, error_result
        self.needs_reset: dict[int, str] = {s: "" for s in range(n)}  # "" = never reset
        self.closed = False

    def check(self, slots: Sequence[int]) -> None:
        """Raise RuntimeError when closed, ValueError on bad or duplicate slots."""
        if self.closed:
            raise RuntimeError(f"{self.owner} is closed")
        bad = [s for s in slots if not 0 <= int(s) < self.n]
        if bad or len(set(slots)) != len(slots):
            raise ValueError(f"slots must be distinct ints in [0, {self.n}); got {list(slots)}")

    def lost(self, slot: int, reason: str) -> None:
        """Mark ``slot``'s episode lost (e.g. its worker was restarted)."""
        self.needs_reset[slot] = reason

    def reset_items(self, slots: Sequence[int], seeds: Sequence[int],
                    options: Sequence[dict | None] | None) -> list[tuple]:
        """``[(slot, seed, options)]`` for a reset call. Raises ValueError on mismatched lengths."""
        options = [None] * len(slots) if options is None else list(options)
        if not len(slots) == len(seeds) == len(options):
            raise ValueError(f"reset needs one seed and one options entry per slot: got {len(slots)} "
                             f"slots, {len(seeds)} seeds, {len(options)} options")
        self.check(slots)
        return [(int(s), None if seed is None else int(seed), opt) for s, seed, opt in zip(slots, seeds, options)]

    def after_reset(self, results: dict) -> dict:
        """Record which resets succeeded; returns the results sorted by slot."""
        for s, res in results.items():
            if res.error is None:
                self.needs_reset.pop(s, None)
            else:
                self.needs_reset[s] = f"its last reset failed: {res.error.splitlines()[0]}"
        return dict(sorted(results.items()))

    def step_items(self, actions: Mapping[int, str]) -> tuple[list[tuple[int, str]], dict]:
        """``([(slot, action)] to dispatch, {slot: error result}`` for slots without an episode).

        Raises: RuntimeError for a slot never reset; TypeError for a non-str action;
        ValueError for a bad slot.
        """
        self.check(list(actions))
        items, early = [], {}
        for s, a in actions.items():
            if not isinstance(a, str):
                raise TypeError(f"{self.owner}.step: action for slot {s} must be str, got {type(a).__name__}")
            reason = self.needs_reset.get(s)
            if reason == "":
                raise RuntimeError(f"{self.owner}.step: slot {s} was never reset; call reset([{s}], [seed]) first")
            if reason is not None:
                early[s] = self._error_result(f"slot {s} has no running episode: {reason}")
                continue
            items.append((int(s), a))
        return items, early

    def after_step(self, results: dict) -> dict:
        """Remember slots whose step failed; returns the results sorted by slot."""
        for s, res in results.items():
            if res.error is not None and s not in self.needs_reset:
                self.needs_reset[s] = f"its last step failed: {res.error.splitlines()[0]}"
        return dict(sorted(results.items()))

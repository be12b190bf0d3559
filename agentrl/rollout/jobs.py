"""A FIFO over lazily generated items, so a rollout of any length holds O(slots) jobs in memory.

``agentrl rollout ... --episodes 1000000000000`` once built the whole job list before the
first episode (≈500 MB/s until ``MemoryError``, issue 20 item 9). The runners now take their
jobs from a ``LazyQueue``: ``extend`` appends an iterable (a generator) without consuming it,
``popleft`` draws the next item, and ``bool(queue)`` looks one item ahead.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["LazyQueue"]

_NOTHING = object()


class LazyQueue(Generic[T]):
    """FIFO of items drawn from iterables on demand (at most one item per iterable is held
    ahead by ``bool``). ``LazyQueue(gen)`` or ``LazyQueue()`` then ``extend(gen)``."""

    def __init__(self, items: Iterable[T] = ()) -> None:
        self._sources: deque[Iterator[T]] = deque()
        self._head: object = _NOTHING
        self.extend(items)

    def extend(self, items: Iterable[T]) -> None:
        """Append ``items`` after everything queued so far (not consumed until drawn)."""
        self._sources.append(iter(items))

    def _fill(self) -> bool:
        while self._head is _NOTHING and self._sources:
            self._head = next(self._sources[0], _NOTHING)
            if self._head is _NOTHING:
                self._sources.popleft()
        return self._head is not _NOTHING

    def __bool__(self) -> bool:
        return self._fill()

    def popleft(self) -> T:
        """The next item. Raises ``IndexError`` when the queue is empty."""
        if not self._fill():
            raise IndexError("pop from an empty LazyQueue")
        item, self._head = self._head, _NOTHING
        return item  # type: ignore[return-value]

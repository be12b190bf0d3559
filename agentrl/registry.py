"""Generic name → object registry with duplicate checks and "did you mean" errors.

Used for estimators (``agentrl.credit``), losses (``agentrl.update``) and engines. Env ids
live in gymnasium's own registry (``agentrl.env.registry`` adds the same error style).
Layer L0.
"""

from __future__ import annotations

import difflib
from typing import Callable, Generic, Iterable, TypeVar

T = TypeVar("T")


def closest(name: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """Up to ``n`` candidates closest to ``name`` (difflib ratio ≥ 0.4), best first."""
    return difflib.get_close_matches(name, list(candidates), n=n, cutoff=0.4)


def unknown_name_error(kind: str, name: str, known: Iterable[str]) -> KeyError:
    """A ``KeyError`` whose message names the bad value, the closest matches and all
    valid names, e.g. ``unknown estimator 'gigp'; did you mean 'gigpo'? Known: ...``."""
    known = sorted(known)
    guess = closest(name, known)
    hint = f"; did you mean {' or '.join(repr(g) for g in guess)}?" if guess else "."
    return KeyError(f"unknown {kind} {name!r}{hint} Known: {', '.join(known) or '(none)'}")


class Registry(Generic[T]):
    """A named collection of objects of one kind.

    Args:
        kind: what is registered (used in error messages), e.g. ``"estimator"``.
    Raises:
        ValueError: on ``register`` of a name that is already taken, or that is not a non-empty str.
        KeyError: on ``get`` / ``unregister`` of an unknown name, listing the closest and all valid names.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str, obj: T) -> T:
        """Add ``obj`` as ``name``; returns ``obj``. ValueError: taken, or not a non-empty str."""
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"a {self.kind} name must be a non-empty string, got {name!r}")
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} is already registered; pick another name")
        self._items[name] = obj
        return obj

    def unregister(self, name: str) -> T:
        """Remove ``name`` and return its object (a plugin registered for one run or one test)."""
        if name not in self._items:
            raise unknown_name_error(self.kind, name, self._items)
        return self._items.pop(name)

    def decorator(self, name: str) -> Callable[[T], T]:
        """``@registry.decorator("name")`` registers the decorated object."""
        return lambda obj: self.register(name, obj)

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise unknown_name_error(self.kind, name, self._items) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self):
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)

"""Store-side queries an estimator can declare (``register_estimator(store_query=NAME)``): a
function that fills ``TurnTable`` columns from the run's stored history before the estimator
runs, looked up here by name so the trainer never names an estimator.

A query is ``(store: TurnStore, run_id: str, table: TurnTable, iteration: int) -> TurnTable``:
``table`` with its columns filled; ``iteration`` is the 1-based iteration the table is scored in
(its own episodes are not history yet). Registered here: ``"state_stats"`` (3SPO's per-state
success statistics over earlier iterations, ``agentrl.store.state_stats.with_state_stats``).
"""

from __future__ import annotations

from typing import Callable

from agentrl.registry import Registry
from agentrl.store.sqlite import TurnStore
from agentrl.store.state_stats import with_state_stats
from agentrl.types import TurnTable

StoreQuery = Callable[[TurnStore, str, TurnTable, int], TurnTable]

_QUERIES: Registry[StoreQuery] = Registry("store query")
_QUERIES.register("state_stats", with_state_stats)


def register_store_query(name: str, fn: StoreQuery) -> StoreQuery:
    """Register ``fn`` as the store query ``name``; returns ``fn``.

    Raises:
        ValueError: ``name`` is already registered.
    """
    return _QUERIES.register(name, fn)


def get_store_query(name: str) -> StoreQuery:
    """The store query registered as ``name``.

    Raises:
        KeyError: unknown name (the message suggests the closest and lists all).
    """
    return _QUERIES.get(name)


def list_store_queries() -> list[str]:
    """Sorted names of the registered store queries."""
    return _QUERIES.names()

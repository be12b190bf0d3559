"""agentrl.store — the SQLite turn store (layer L1, beside env and llm: it depends only on types).

Owns: the on-disk schema (``schema``), exact Turn encoding (``codec``), batch validation
and id assignment (``batch``), ``TurnStore`` (``sqlite``), the columnar ``TurnTable`` build
(``table``), Parquet export (``export``), consistent copies (``backup``) and 3SPO's per-state
success statistics over a run's earlier iterations (``state_stats``), and the registry of
store queries estimators declare (``queries``: ``get_store_query``, ``register_store_query``).
May import: ``agentrl.types``, ``agentrl.registry`` and the standard library / NumPy /
pyarrow. It meets the rest of agentrl only through ``Episode``/``Turn`` in and
``TurnTable`` out; it never imports torch.
"""

from agentrl.store.backup import BackupSummary, backup
from agentrl.store.export import export_parquet
from agentrl.store.queries import get_store_query, list_store_queries, register_store_query
from agentrl.store.records import AdvantageRecord, EpisodeRecord, MetricRecord
from agentrl.store.schema import SchemaVersionError, StoreDamagedError, StoreError, StorePathError
from agentrl.store.sqlite import EVAL_RUN, INTERRUPTED, TurnStore
from agentrl.store.state_stats import (StateStats, query_state_stats, state_stats_column, state_success_stats,
                                       with_state_stats)

__all__ = [
    "AdvantageRecord",
    "BackupSummary",
    "EVAL_RUN",
    "EpisodeRecord",
    "INTERRUPTED",
    "MetricRecord",
    "SchemaVersionError",
    "StateStats",
    "StoreDamagedError",
    "StoreError",
    "StorePathError",
    "TurnStore",
    "backup",
    "export_parquet",
    "get_store_query",
    "list_store_queries",
    "register_store_query",
    "query_state_stats",
    "state_stats_column",
    "state_success_stats",
    "with_state_stats",
]

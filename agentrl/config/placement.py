"""``rollout.placement``: where Ray engine actors land relative to the trainer (issue 37, several nodes).

Kept apart from ``agentrl.config.sections`` (which embeds it in ``RolloutConfig``) so each
module stays small. Layer L0: standard library only. Used by ``agentrl.train.steps`` (the
engine actors, ``agentrl.rollout.engines.ray_actors``) and ``agentrl.cli.train`` (the
``--ray-ranks`` trainer ranks, ``agentrl.distributed.ray_launch``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

from agentrl.config.errors import check as _check

__all__ = ["PlacementSpec", "PLACEMENT_STRATEGIES"]

#: Ray placement-group strategies for the engine actors' bundles.
PLACEMENT_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
_RAY_BUILTIN = ("CPU", "GPU", "memory", "object_store_memory")


def _check_resources(key: str, resources: dict) -> None:
    for name, amount in resources.items():
        _check(isinstance(name, str) and name.strip() != "", f"{key}: resource names must be non-empty strings")
        _check(name not in _RAY_BUILTIN, f"{key}: {name!r} is a built-in Ray resource; give CPUs with "
               "rollout.placement.engine_cpus / --cpus-per-rank and GPUs with rollout.engine_gpus / "
               "--gpus-per-rank, and only custom node resources here (e.g. {engine_node: 1})")
        ok = isinstance(amount, (int, float)) and not isinstance(amount, bool) and amount > 0
        _check(ok, f"{key}.{name} must be a number > 0 (units of the custom resource a node declares with "
               f"ray start --resources '{{\"{name}\": N}}'), got {amount!r}")


@dataclass(frozen=True)
class PlacementSpec:
    """``rollout.placement``: which Ray nodes the engine actors (``rollout.backend: ray``,
    ``rollout.engines`` ≥ 1) and the ``--ray-ranks`` trainer ranks run on.
    ``engine_resources``: custom Ray resources each engine actor reserves in its bundle
    (``{engine_node: 1}``: only nodes started with ``ray start --resources '{"engine_node": N}'``
    hold it, at most N actors each); {} = any node.
    ``trainer_resources``: custom Ray resources each ``--ray-ranks`` trainer rank reserves
    (``{trainer_node: 1}``); without ``--ray-ranks`` the trainer is the command's own process,
    on the node it was started on. ``engine_cpus``: Ray CPUs each engine actor reserves
    (fractions allowed). ``strategy``: the engine actors' placement group strategy (``PACK``:
    as few nodes as possible; ``SPREAD``; ``STRICT_PACK``: one node; ``STRICT_SPREAD``: one
    node each). ``separate_nodes``: refuse to start (``EngineWorkerError``, before any actor
    starts) when a bundle of the engine actors lands on the trainer's node (rank 0's: the
    broadcast group's root). ``broadcast_host``: the address the engine actors reach the
    trainer's weight store at (its ``TCPStore``; null = the trainer's node IP as Ray reports
    it). ``broadcast_ports``: [first, last] ports the weight store may listen on (inclusive; a
    restart of an actor opens a new store on the next free one; null = any free port)."""

    engine_resources: dict[str, float] = field(default_factory=dict)
    trainer_resources: dict[str, float] = field(default_factory=dict)
    engine_cpus: float = 1.0
    strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"
    separate_nodes: bool = False
    broadcast_host: Optional[str] = None
    broadcast_ports: Optional[tuple[int, ...]] = None

    def __post_init__(self) -> None:
        _check_resources("rollout.placement.engine_resources", self.engine_resources)
        _check_resources("rollout.placement.trainer_resources", self.trainer_resources)
        _check(self.engine_cpus > 0, f"rollout.placement.engine_cpus must be > 0 (Ray CPUs per engine actor; "
               f"fractions allowed), got {self.engine_cpus}")
        _check(self.broadcast_host is None or self.broadcast_host.strip() != "",
               "rollout.placement.broadcast_host must be an address (IP or host name) or null (the trainer's node IP)")
        ports = self.broadcast_ports
        if ports is not None:
            _check(len(ports) == 2 and all(isinstance(p, int) and 1 <= p <= 65535 for p in ports)
                   and ports[0] <= ports[1], f"rollout.placement.broadcast_ports must be [first, last] with "
                   f"1 <= first <= last <= 65535 (e.g. [29600, 29609]), or null for any free port; got {list(ports)}")

    @property
    def is_default(self) -> bool:
        """True when no key differs from its default (the placement of before: any node)."""
        return self == PlacementSpec()

    def engine_keys_set(self) -> list[str]:
        """The keys that only act on Ray engine actors and differ from their defaults."""
        default = PlacementSpec()
        return [k for k in ("engine_resources", "engine_cpus", "strategy", "separate_nodes", "broadcast_host",
                            "broadcast_ports") if getattr(self, k) != getattr(default, k)]

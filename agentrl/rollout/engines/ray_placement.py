"""Where Ray engine actors run: their bundles, the placement group, and the nodes it landed on.

``RayEngineWorkers`` (``agentrl.rollout.engines.ray_actors``) reserves one bundle per actor —
``{"CPU": c, "GPU": g, **custom}`` from ``rollout.placement.engine_cpus``,
``rollout.engine_gpus`` and ``rollout.placement.engine_resources`` — in one placement group
with ``rollout.placement.strategy``, and each actor asks for exactly its bundle. Custom node
resources (``ray start --resources '{"engine_node": 4}'``) are how the actors are kept on the
engine nodes; ``separate_nodes`` then checks, before any actor starts, that no bundle landed
on the trainer's node. No torch here.
"""

from __future__ import annotations

from typing import Mapping

from agentrl.rollout.engines.interface import EngineWorkerError

__all__ = ["EnginePlacement", "engine_bundle"]


def engine_bundle(num_cpus: float, num_gpus: float, resources: Mapping[str, float] | None = None) -> dict[str, float]:
    """One engine actor's bundle: ``num_cpus`` Ray CPUs, ``num_gpus`` GPUs (left out when 0)
    and the custom ``resources`` (units of each)."""
    bundle = {"CPU": float(num_cpus)} | ({"GPU": float(num_gpus)} if num_gpus else {})
    return bundle | {str(k): float(v) for k, v in (resources or {}).items()}


class EnginePlacement:
    """The placement group of ``n`` engine actors, ready (its bundles reserved).

    Args:
        ray: the ``ray`` module (initialised). n: actors. bundle: each actor's (``engine_bundle``).
        strategy: ``PACK | SPREAD | STRICT_PACK | STRICT_SPREAD``.
        separate_nodes: refuse a bundle on ``trainer_node``.
        timeout_s: seconds to wait for the bundles.
    Attributes:
        group: Ray's placement group. nodes: the Ray node id of each bundle.
        trainer_node: the Ray node id of this process (the trainer, rank 0 of the weight group).
    Raises:
        EngineWorkerError: the bundles could not be reserved within ``timeout_s`` (the bundle
            and the cluster's resources in the message, with the fix), or ``separate_nodes``
            and a bundle is on the trainer's node. The group is removed first.
    """

    def __init__(self, ray, n: int, bundle: Mapping[str, float], *, strategy: str = "PACK",
                 separate_nodes: bool = False, timeout_s: float = 600.0) -> None:
        from ray.util.placement_group import placement_group

        self._ray, self.bundle = ray, dict(bundle)
        self.trainer_node = ray.get_runtime_context().get_node_id()
        self.group = placement_group([dict(bundle) for _ in range(n)], strategy=strategy)
        custom = sorted(k for k in bundle if k not in ("CPU", "GPU"))
        try:
            ray.get(self.group.ready(), timeout=timeout_s)
        except Exception as exc:
            self.remove()
            hint = (f"; a node must declare {custom} (ray start --resources ...), or change "
                    "rollout.placement.engine_resources") if custom else ""
            raise EngineWorkerError(f"engine actors could not be placed ({n} bundles of {self.bundle}, strategy "
                                    f"{strategy}) in {timeout_s}s: {type(exc).__name__}; cluster: "
                                    f"{ray.cluster_resources()}{hint}") from None
        table = ray.util.placement_group_table(self.group)["bundles_to_node_id"]
        self.nodes = [str(table[i]) for i in range(n)]
        if separate_nodes and self.trainer_node in self.nodes:
            self.remove()
            raise EngineWorkerError(
                f"rollout.placement.separate_nodes: {self.nodes.count(self.trainer_node)} engine actor bundle(s) "
                f"landed on the trainer's node {self.trainer_node[:12]}; give only the engine nodes a custom "
                "resource (ray start --resources '{\"engine_node\": 4}') and set rollout.placement."
                "engine_resources: {engine_node: 1}, or set separate_nodes: false")

    def options(self, i: int) -> dict:
        """``.options(...)`` of actor ``i``: exactly its bundle, scheduled into bundle ``i``."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        custom = {k: v for k, v in self.bundle.items() if k not in ("CPU", "GPU")}
        return {"num_cpus": self.bundle["CPU"], "num_gpus": self.bundle.get("GPU", 0.0), "resources": custom,
                "scheduling_strategy": PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=i)}

    def remove(self) -> None:
        """Release the bundles (best effort, idempotent)."""
        from ray.util.placement_group import remove_placement_group

        try:
            remove_placement_group(self.group)
        except Exception:
            pass

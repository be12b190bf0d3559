"""``rollout.placement`` (issue 37, several nodes): defaults, YAML round trip, and every bad
value refused with one line naming the fix."""

from __future__ import annotations

import pytest

from agentrl.config import ConfigError, PlacementSpec, config_from_dict, to_dict

RAY = {"engines": 2, "backend": "ray"}


def _cfg(**rollout):
    return config_from_dict({"env": {"id": "agentrl/Toy-v0"}, "rollout": rollout})


def test_defaults_keep_the_placement_of_before_and_keys_round_trip():
    assert _cfg().rollout.placement == PlacementSpec() and PlacementSpec().is_default
    pl = {"engine_resources": {"engine_node": 1}, "trainer_resources": {"trainer_node": 1}, "engine_cpus": 0.5,
          "strategy": "SPREAD", "separate_nodes": True, "broadcast_host": "10.0.0.1", "broadcast_ports": [29600, 29609]}
    cfg = _cfg(**RAY, placement=pl)
    assert cfg.rollout.placement.broadcast_ports == (29600, 29609)
    assert to_dict(cfg)["rollout"]["placement"] == pl
    assert _cfg(placement={"trainer_resources": {"trainer_node": 1}}).rollout.placement.engine_keys_set() == []


@pytest.mark.parametrize("placement, match", [
    ({"engine_resources": {"GPU": 1}}, "built-in Ray resource; give CPUs with rollout.placement.engine_cpus"),
    ({"trainer_resources": {"CPU": 1}}, "built-in Ray resource"),
    ({"engine_resources": {"engine_node": 0}}, r"engine_resources.engine_node must be a number > 0"),
    ({"engine_resources": {"engine_node": "x"}}, r"must be a number > 0"),
    ({"engine_cpus": 0}, "engine_cpus must be > 0"),
    ({"broadcast_ports": [29610, 29600]}, r"broadcast_ports must be \[first, last\]"),
    ({"broadcast_ports": [0, 5]}, r"broadcast_ports must be \[first, last\]"),
    ({"broadcast_host": " "}, "broadcast_host must be an address"),
    ({"strategy": "SPRED"}, "did you mean 'SPREAD'"),
    ({"engine_node": 1}, "unknown config key 'rollout.placement.engine_node'"),
])
def test_bad_placement_is_refused_with_the_fix(placement, match):
    with pytest.raises(ConfigError, match=match):
        _cfg(**RAY, placement=placement)


def test_engine_placement_needs_ray_engine_actors():
    with pytest.raises(ConfigError, match="separate_nodes act only on Ray engine actors; set rollout.backend: ray"):
        _cfg(placement={"separate_nodes": True})
    with pytest.raises(ConfigError, match="engine_resources act only on Ray engine actors"):
        _cfg(engines=2, placement={"engine_resources": {"engine_node": 1}})


def test_weight_transport_shared_memory_is_for_local_workers_only():
    from agentrl.config import ConfigError
    from agentrl.config.sections import RolloutConfig

    assert RolloutConfig().weight_transport == "auto"
    assert RolloutConfig(engines=2, weight_transport="shared_memory").weight_transport == "shared_memory"
    assert RolloutConfig(backend="ray", engines=2, weight_transport="broadcast").weight_transport == "broadcast"
    with pytest.raises(ConfigError, match="shared_memory reaches local engine workers only"):
        RolloutConfig(backend="ray", engines=2, weight_transport="shared_memory")

"""Issue 37, several nodes: the trainer and the Ray engine actors on two Ray "nodes" of this
machine (``ray.cluster_utils.Cluster``: a head node declaring ``{"trainer_node": 1}`` and one
added node declaring ``{"engine_node": 2}`` and one GPU that Ray only counts, 1 CPU each; the
test process is the driver, on the head node).

- a 2-iteration run (``rollout.placement.engine_resources: {engine_node: 1}``,
  ``separate_nodes: true``) trains with both engine actors on the engine node and the trainer
  on the head node, the weight group (gloo) spanning the two nodes: every engine's sync probe
  within 1e-4 of the trainer after each push, every turn's ``policy_version`` its iteration;
- an engine actor's resource request (``rollout.engine_gpus``, ``engine_cpus``,
  ``engine_resources``) is the bundle Ray reserved and the resources Ray assigned it;
- ``separate_nodes`` refuses bundles on the trainer's node before any actor starts;
- ``--ray-ranks`` trainer ranks land where ``rollout.placement.trainer_resources`` says, and a
  2-iteration run with its trainer rank as a Ray actor on the head node and its engine actors
  on the engine node trains with every engine's probe within 1e-4.
Real separate machines and NCCL over a network are not tested here (docs/scaling.md).
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'agentrl[ray]'")
torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from test_train_loop import _cfg  # noqa: E402

import ray._common.utils  # noqa: E402  (the address file, see two_nodes)
import ray._private.utils  # noqa: E402
from agentrl.rollout.engines.interface import EngineWorkerError  # noqa: E402

#: start deadline of the Ray ranks and workers here: a guard against a hang, not a speed bound (a rank's
#: process took > 60 s to start on 2 cores at load 7, 2026-12-05)
START_S = 180
from agentrl.rollout.engines.ray_actors import RayEngineWorkers  # noqa: E402
from agentrl.rollout.ray_backend import ensure_ray  # noqa: E402
from agentrl.store import TurnStore  # noqa: E402

ENGINE_NODE = {"engine_resources": {"engine_node": 1}, "engine_cpus": 0.5, "separate_nodes": True}


@pytest.fixture(scope="module")
def two_nodes():
    """(head node id, engine node id) of a 2-node local cluster this process is connected to."""
    from ray.cluster_utils import Cluster

    torch.set_num_threads(1)
    mp = pytest.MonkeyPatch()
    mp.delenv("RAY_ADDRESS", raising=False)
    # Cluster would write its address to /tmp/ray/ray_current_cluster (and delete that file at
    # shutdown), where any other process's plain ray.init() on this machine would find it and
    # join this cluster: keep it out of there (the driver below connects by address)
    mp.setattr(ray._private.utils, "write_ray_address", lambda *args, **kwargs: None, raising=False)
    mp.setattr(ray._common.utils, "reset_ray_address", lambda *args, **kwargs: None, raising=False)
    assert not ray.is_initialized()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"trainer_node": 1}})
    try:
        engine = cluster.add_node(num_cpus=1, num_gpus=1, resources={"engine_node": 2})
        cluster.wait_for_nodes()
        ensure_ray(address=cluster.address)
        yield cluster.head_node.node_id, engine.node_id
    finally:
        ray.shutdown()
        cluster.shutdown()
        mp.undo()


def _spy(monkeypatch) -> list:
    """Record each ``RayEngineWorkers``' actors' ``env()`` (node id, resources) and bundles at start."""
    seen, start = [], RayEngineWorkers.__init__

    def spy(self, *args, **kwargs):
        start(self, *args, **kwargs)
        bundles = list(ray.util.placement_group_table(self.placement_group)["bundles"].values())
        seen.append({"env": self.worker_env(), "bundles": bundles, "trainer_node": self.trainer_node,
                     "host": self._sender.host})

    monkeypatch.setattr(RayEngineWorkers, "__init__", spy)
    return seen


@pytest.mark.slow
def test_two_node_run_engines_on_engine_node_trainer_on_head(two_nodes, tiny_dir, tmp_path, monkeypatch):
    from agentrl.train import train

    head, engine_node = two_nodes
    seen = _spy(monkeypatch)
    cfg = _cfg(tiny_dir, tmp_path, name="two", rollout__engines=2, rollout__backend="ray", run__eval_every=0,
               run__save_every=0, run__seed=0, rollout__placement=ENGINE_NODE)
    result = train(cfg, resume=False)
    assert result.state.iteration == 2 and result.state.policy_version == 2

    assert ray.get_runtime_context().get_node_id() == head  # the trainer (this process) ran on the head node
    (start,) = seen
    assert start["trainer_node"] == head
    assert [e["node_id"] for e in start["env"]] == [engine_node, engine_node]  # asked inside each actor
    assert start["bundles"] == [{"CPU": 0.5, "engine_node": 1.0}] * 2
    assert start["host"] == ray.util.get_node_ip_address()  # the weight store: the node IP Ray reports
    assert all(e["ip"] for e in start["env"])  # each actor's gloo connections: its node IP (ray.util)

    per_iteration = cfg.rollout.groups_per_iteration * cfg.rollout.group_size
    with TurnStore(result.store_path, readonly=True) as store:
        episodes = store.load_episodes(result.run_id)
    versions = [(t.policy_version, e.episode_id // per_iteration) for e in episodes for t in e.turns]
    assert len(episodes) == 2 * per_iteration and all(e.status == "ok" for e in episodes)
    assert {it for _, it in versions} == {0, 1} and all(v == it for v, it in versions)
    rows = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:  # both engine actors scored the probe after each push, against the trainer
        assert r["sync/probe_engines"] == 2 and 0.0 <= r["sync/probe_max_abs_diff"] <= 1e-4, r


def test_engine_actor_resource_request_is_what_ray_reserves(two_nodes, tiny_dir, tmp_path, monkeypatch):
    """``open_engines`` from config: 1 GPU (counted, not used: the engine is built on the CPU
    stand-in), half a CPU and 1 ``engine_node`` per actor — Ray's bundle, assigned resources and
    GPU ids in the actor, on the engine node."""
    from agentrl.llm.policy import load_policy
    from agentrl.train import steps

    head, engine_node = two_nodes
    real = steps.engine_spec
    monkeypatch.setattr(steps, "engine_spec", lambda cfg, policy: replace(real(cfg, policy), device="cpu"))
    cfg = _cfg(tiny_dir, tmp_path, rollout__engines=1, rollout__backend="ray", rollout__engine_gpus=1,
               rollout__placement=ENGINE_NODE)
    assert real(cfg, load_policy(cfg.policy)).device == "cuda"  # what a real run's actor would use
    workers = steps.open_engines(cfg, load_policy(cfg.policy))
    try:
        bundles = list(ray.util.placement_group_table(workers.placement_group)["bundles"].values())
        assert bundles == [{"CPU": 0.5, "GPU": 1.0, "engine_node": 1.0}]
        (env,) = workers.worker_env()
        assert {k: env["resources"].get(k) for k in ("CPU", "GPU", "engine_node")} == \
               {"CPU": 0.5, "GPU": 1.0, "engine_node": 1.0}
        assert len(env["gpu_ids"]) == 1 and env["CUDA_VISIBLE_DEVICES"] == str(env["gpu_ids"][0])
        assert env["node_id"] == engine_node and workers.nodes == [engine_node] and workers.trainer_node == head
    finally:
        workers.close()


def test_separate_nodes_refuses_engines_on_the_trainer_node(two_nodes, tiny_dir):
    from agentrl.rollout.engines.factory import open_engine_workers

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rollout"))
    import engine_worker_checks as checks

    with pytest.raises(EngineWorkerError, match="landed on the trainer's node"):
        open_engine_workers("ray", 1, checks.spec_of(tiny_dir), checks.initial_state(tiny_dir), 0,
                            num_cpus_per_worker=0.5, resources={"trainer_node": 0.5}, separate_nodes=True,
                            start_timeout_s=START_S)
    assert ray.util.placement_group_table() == {} or all(  # its bundles were given back
        g["state"] == "REMOVED" for g in ray.util.placement_group_table().values())


def _where() -> str:
    return ray.get_runtime_context().get_node_id()


def test_ray_ranks_follow_trainer_resources(two_nodes):
    from agentrl.distributed.ray_launch import launch

    head, engine_node = two_nodes
    assert launch(_where, ranks=1, cpus_per_rank=0.5, resources={"trainer_node": 1}, start_timeout_s=START_S) == head
    assert launch(_where, ranks=1, cpus_per_rank=0.5, resources={"engine_node": 1}, start_timeout_s=START_S) == engine_node


@pytest.mark.slow
def test_ray_ranks_trainer_on_head_engines_on_engine_node(two_nodes, tiny_dir, tmp_path):
    """``agentrl train --ray-ranks 1`` form: the trainer rank is a Ray actor that
    ``trainer_resources`` puts on the head node, and it opens the engine actors, which
    ``engine_resources`` put on the engine node (``separate_nodes`` would refuse otherwise)."""
    from agentrl.distributed.ray_launch import launch
    from agentrl.train import train

    head, engine_node = two_nodes
    placement = {**ENGINE_NODE, "trainer_resources": {"trainer_node": 1}}
    cfg = _cfg(tiny_dir, tmp_path, name="ranks", rollout__engines=2, rollout__backend="ray", run__eval_every=0,
               run__save_every=0, run__seed=0, rollout__placement=placement)
    before = set(ray.util.placement_group_table())
    result = launch(train, (cfg,), {"resume": False}, ranks=1, cpus_per_rank=0.5,
                    resources=dict(cfg.rollout.placement.trainer_resources), start_timeout_s=START_S)
    assert result.state.iteration == 2 and result.state.policy_version == 2
    # the run's placement groups (removed at its end, Ray keeps where their bundles were)
    groups = [g for k, g in ray.util.placement_group_table().items() if k not in before]
    where = {tuple(sorted(b)): set(g["bundles_to_node_id"].values()) for g in groups for b in g["bundles"].values()}
    assert where == {("CPU", "trainer_node"): {head}, ("CPU", "engine_node"): {engine_node}}, where
    rows = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["sync/probe_engines"] == 2 and r["sync/probe_max_abs_diff"] <= 1e-4 for r in rows), rows

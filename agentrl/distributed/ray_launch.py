"""Data-parallel training on a Ray cluster: ``agentrl train CFG --ray-ranks N``.

``launch(fn, args, kwargs, ranks=N)`` places N trainer ranks as Ray actors (one placement group,
one bundle per rank: ``cpus_per_rank`` CPUs, ``gpus_per_rank`` GPUs and the custom node
``resources`` of ``rollout.placement.trainer_resources``, packed onto as few nodes as possible), gives each rank torchrun's process-group environment (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR`` = rank 0's node IP,
``MASTER_PORT`` = a port free there), then calls ``fn(*args, **kwargs)`` in every rank at once
and returns rank 0's return value. With ``fn = agentrl.train.train`` each rank's
``DistContext.from_env`` then joins the group exactly as under torchrun (gloo on CPU, NCCL on
GPU), so a Ray run and a torchrun run of the same config are the same run.

Why actors, not Ray Train's ``TorchTrainer``: ``ray.train`` needs the ``ray[train]`` extra
(pyarrow, pandas, ...) and its own checkpoint/reporting protocol, while the loop already has
its own (``agentrl.update.checkpoint``); a few actors and a placement group are all the
process group needs. Ray is only the placer here, never a transport: the ranks talk through
torch.distributed.

Ranks are ordered by node (the driver's node first, so rank 0 — which writes the store, logs
and run folder — sits beside the driver when it can), local ranks follow the bundle order on
a node. With ``gpus_per_rank=1`` every rank on a node sees all of that node's rank GPUs in
``CUDA_VISIBLE_DEVICES``, ordered by local rank, so ``cuda:LOCAL_RANK`` is its own GPU (Ray
Train does the same). Each actor gets this process's ``sys.path`` (``PYTHONPATH``),
``OMP_NUM_THREADS=1``, the driver's working directory when it exists on its node, and the
driver's ``HF_*`` / ``TRANSFORMERS_*`` / ``TOKENIZERS_PARALLELISM`` / ``AGENTRL_*`` variables.

Failure: the wait is event-driven (``ray.wait``); the first rank that raises or dies ends the
launch: every actor is killed (the other ranks would otherwise wait in a collective until
torch's 30-minute timeout) and ``RayLaunchError`` names the rank and its error. Start-up is
bounded by ``start_timeout_s``, the whole run optionally by ``timeout_s``.

Several nodes need the same Python environment (and agentrl) at the same path on every node,
the model folder on every node, and ``run.out_dir`` on a shared filesystem (the distributed
checkpoints are written by every rank). Tested here on a local 2-CPU Ray only.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable

__all__ = ["RayLaunchError", "launch", "rank_layout"]

_FORWARD_PREFIXES = ("HF_", "TRANSFORMERS_", "AGENTRL_", "TOKENIZERS_PARALLELISM")


class RayLaunchError(RuntimeError):
    """A Ray launch failed: a rank raised or died, the ranks could not be placed, or the run
    went past its time limit. ``rank`` is the failing rank (None when no rank is to blame)."""

    def __init__(self, message: str, rank: int | None = None) -> None:
        super().__init__(message)
        self.rank = rank


def _require_ray():
    try:
        import ray
    except ModuleNotFoundError:
        raise ModuleNotFoundError("--ray-ranks needs ray: pip install 'agentrl[ray]' (or launch with torchrun, "
                                  "docs/scaling.md)") from None
    return ray


class _Rank:
    """Actor body of one trainer rank: reports where it runs, then runs the train function."""

    def where(self) -> dict:
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "ip": ray.util.get_node_ip_address(),
                "gpus": [str(g) for g in ray.get_gpu_ids()]}

    def free_port(self) -> int:
        import socket

        with socket.socket() as s:
            s.bind(("", 0))
            return int(s.getsockname()[1])

    def run(self, env: dict[str, str], cwd: str, fn: Callable, args: tuple, kwargs: dict) -> Any:
        os.environ.update(env)
        if os.path.isdir(cwd):
            os.chdir(cwd)
        return fn(*args, **kwargs)


def rank_layout(places: list[dict], driver_node: str) -> list[dict[str, Any]]:
    """Rank environment of each placed actor (``places[i]``: ``where()`` of actor i, in bundle
    order), without ``MASTER_PORT``: nodes in order of first appearance with ``driver_node``
    first, ranks numbered node by node, local ranks in bundle order.

    Returns:
        one dict per actor (same order as ``places``): ``rank``, ``local_rank``,
        ``local_world_size``, ``node_rank``, ``ip``, ``cuda_visible`` (the node's rank GPUs in
        local-rank order, comma-separated; "" without GPUs).
    """
    nodes: list[str] = []
    for p in places:
        if p["node_id"] not in nodes:
            nodes.append(p["node_id"])
    if driver_node in nodes:
        nodes.remove(driver_node)
        nodes.insert(0, driver_node)
    order = [i for n in nodes for i, p in enumerate(places) if p["node_id"] == n]
    out: list[dict[str, Any]] = [{} for _ in places]
    for rank, i in enumerate(order):
        node = places[i]["node_id"]
        peers = [j for j in order if places[j]["node_id"] == node]
        out[i] = {"rank": rank, "local_rank": peers.index(i), "local_world_size": len(peers),
                  "node_rank": nodes.index(node), "ip": places[i]["ip"],
                  "cuda_visible": ",".join(g for j in peers for g in places[j]["gpus"])}
    return out


def _connect(ray, address: str | None, num_cpus: int) -> bool:
    """Join the cluster at ``address`` / ``$RAY_ADDRESS``, or start a local Ray with
    ``num_cpus`` CPUs; True when this call started (or joined) Ray and must shut it down."""
    if ray.is_initialized():
        return False
    local = address is None and not os.environ.get("RAY_ADDRESS")
    # "local": a fresh local Ray even when `ray start` left a cluster on this machine (ray.init() would
    # join that one, and then refuses num_cpus)
    ray.init(address="local" if local else address, num_cpus=num_cpus if local else None, include_dashboard=False,
             log_to_driver=True, configure_logging=False)
    return True


def _worker_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.startswith(_FORWARD_PREFIXES)}
    env.update(PYTHONPATH=os.pathsep.join(p for p in sys.path if p), OMP_NUM_THREADS="1")
    return env


def _cause(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)  # RayTaskError: the exception the rank raised
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''} (the rank's process died: out of memory, or " \
           "killed; see its log under /tmp/ray/session_latest/logs)"


def launch(fn: Callable, args: tuple = (), kwargs: dict | None = None, *, ranks: int, address: str | None = None,
           gpus_per_rank: int = 0, cpus_per_rank: float = 1.0, resources: dict[str, float] | None = None,
           start_timeout_s: float = 300.0,
           timeout_s: float | None = None, poll_s: float = 0.5) -> Any:
    """Run ``fn(*args, **kwargs)`` in ``ranks`` Ray actors that form one torch process group
    (see the module docstring) and return rank 0's return value.

    Args:
        fn: importable on every node (pickled by reference), e.g. ``agentrl.train.train``.
        ranks: world size N (≥ 1).
        address: Ray cluster to join (``ray start --head`` prints it; ``"auto"``: the cluster
            on this node); None: ``$RAY_ADDRESS``, else a local Ray with
            ``ranks × cpus_per_rank`` CPUs that is shut down at the end. A Ray already
            initialised in this process is used as it is (and left running).
        gpus_per_rank: 0 (CPU ranks) or 1 (one GPU per rank, ``cuda:LOCAL_RANK``).
        cpus_per_rank: Ray CPU resource each rank reserves (fractions allowed).
        resources: custom Ray resources each rank reserves (``{"trainer_node": 1}``: only nodes
            started with ``ray start --resources '{"trainer_node": N}'``); None: any node.
        start_timeout_s: seconds for the ranks to be placed and started.
        timeout_s: seconds the whole run may take (None: no limit; a failing rank still ends
            the launch at once).
        poll_s: seconds between checks of the deadline while waiting for the ranks.
    Raises:
        ValueError: bad ranks / gpus_per_rank / cpus_per_rank.
        ModuleNotFoundError: ray is not installed.
        RayLaunchError: the cluster cannot place the ranks in time; a rank raised (its
            exception type and message are in the text; ``.rank`` says which) or died; the
            run passed ``timeout_s``. Every rank is stopped first.
    """
    if ranks < 1:
        raise ValueError(f"--ray-ranks must be >= 1, got {ranks}")
    if gpus_per_rank not in (0, 1):
        raise ValueError(f"--gpus-per-rank must be 0 or 1 (each rank trains on one GPU, cuda:LOCAL_RANK), "
                         f"got {gpus_per_rank}")
    if cpus_per_rank <= 0:
        raise ValueError(f"cpus_per_rank must be > 0, got {cpus_per_rank}")
    ray = _require_ray()
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    started = _connect(ray, address, num_cpus=max(1, int(-(-ranks * cpus_per_rank // 1))))
    custom = {str(k): float(v) for k, v in (resources or {}).items()}
    bundle = {"CPU": float(cpus_per_rank), **({"GPU": float(gpus_per_rank)} if gpus_per_rank else {}), **custom}
    pg, actors = None, []
    try:
        pg = placement_group([dict(bundle) for _ in range(ranks)], strategy="PACK")
        if not ray.wait([pg.ready()], timeout=start_timeout_s)[0]:
            raise RayLaunchError(f"Ray could not place {ranks} rank(s) of {bundle} within {start_timeout_s:.0f} s; "
                                 f"the cluster has {ray.cluster_resources()}: lower --ray-ranks / --gpus-per-rank, "
                                 "or add nodes (ray start --address HEAD:6379" + (f" --resources with {sorted(custom)}, or change "
                                 "rollout.placement.trainer_resources)" if custom else ")"))
        cls = ray.remote(_Rank)
        env = _worker_env()
        actors = [cls.options(num_cpus=cpus_per_rank, num_gpus=gpus_per_rank, resources=custom, max_restarts=0,
                              runtime_env={"env_vars": env},
                              scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i))
                  .remote() for i in range(ranks)]
        places = _get(ray, [a.where.remote() for a in actors], start_timeout_s, "start")
        layout = rank_layout(places, ray.get_runtime_context().get_node_id())
        first = next(i for i, lay in enumerate(layout) if lay["rank"] == 0)
        port = _get(ray, [actors[first].free_port.remote()], start_timeout_s, "start")[0]
        refs: dict[Any, int] = {}
        for actor, lay in zip(actors, layout):
            rank_env = {"RANK": str(lay["rank"]), "WORLD_SIZE": str(ranks), "LOCAL_RANK": str(lay["local_rank"]),
                        "LOCAL_WORLD_SIZE": str(lay["local_world_size"]), "GROUP_RANK": str(lay["node_rank"]),
                        "MASTER_ADDR": layout[first]["ip"], "MASTER_PORT": str(port)}
            if gpus_per_rank:
                rank_env["CUDA_VISIBLE_DEVICES"] = lay["cuda_visible"]
            refs[actor.run.remote(rank_env, os.getcwd(), fn, tuple(args), dict(kwargs or {}))] = lay["rank"]
        return _wait_all(ray, refs, timeout_s, poll_s)
    finally:
        for a in actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:
                pass
        if pg is not None:
            try:
                remove_placement_group(pg)
            except Exception:
                pass
        if started:
            ray.shutdown()


def _get(ray, refs: list, timeout_s: float, what: str) -> list:
    """``ray.get`` with a deadline, as ``RayLaunchError``."""
    try:
        return ray.get(refs, timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise RayLaunchError(f"the Ray ranks did not {what} within {timeout_s:.0f} s") from None
    except Exception as exc:
        raise RayLaunchError(f"a Ray rank failed to {what}: {_cause(exc)}") from None


def _wait_all(ray, refs: dict[Any, int], timeout_s: float | None, poll_s: float) -> Any:
    """Rank 0's result once every rank has returned; the first failure (or the deadline) raises."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    pending, results = list(refs), {}
    while pending:
        done, pending = ray.wait(pending, num_returns=1, timeout=poll_s)
        for ref in done:
            rank = refs[ref]
            try:
                results[rank] = ray.get(ref)
            except Exception as exc:
                raise RayLaunchError(f"rank {rank} of {len(refs)} failed: {_cause(exc)}; the other ranks were "
                                     "stopped", rank=rank) from None
        if deadline is not None and time.monotonic() > deadline and pending:
            left = sorted(refs[r] for r in pending)
            raise RayLaunchError(f"the run passed its time limit of {timeout_s:.0f} s; ranks {left} still running "
                                 "were stopped")
    return results[0]

"""agentrl.rollout.engines — rollout engines apart from the in-process loop (layer L3, no torch at import).

One room, one module per job, read top to bottom:

- ``interface``: ``EngineSpec``, the ``EngineWorkers`` protocol, ``WorkerScore``,
  ``EngineWorkerError`` and the sharding every backend shares (whole groups per worker,
  per-(episode, turn) seeds, ``aborted`` episodes for a dead worker);
- ``worker``: ``EngineWorker``, the body of one worker (engine + renderer + env pool);
- ``procs`` / ``ray_actors``: the backends (local spawned processes; Ray actors in a
  placement group), both fed weights over ``agentrl.llm.weight_broadcast``, each
  importing only ``interface`` and ``worker`` (``ray_actors`` also ``ray_placement``: the
  actors' bundles, placement group and the nodes it landed on, ``rollout.placement``);
- ``factory``: ``open_engine_workers`` (backend by name);
- ``stream``, ``stream_worker``, ``stream_buffer``: asynchronous rollouts with bounded
  staleness (``rollout.max_staleness`` ≥ 1).

This ``__init__`` imports nothing: import the module you need.
"""

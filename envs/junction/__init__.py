"""Junction maze (dependency-free, deterministic): K junctions per episode whose exits are
decided by cue words through each junction's own fixed cue table; wrong exits end the episode.
Exposes its state graph (``task_graph()``) for exact values. Registered as
``agentrl/JunctionMaze-v0``."""

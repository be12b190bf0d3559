"""ALFWorld text env (``agentrl/ALFWorld-v0``), its game data, planner walkthroughs,
task generator and evaluation panels. Heavy modules (textworld, alfworld) are imported
only when an env is constructed or a game is planned/generated."""

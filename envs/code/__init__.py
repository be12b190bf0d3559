"""Code-execution envs on HumanEval (ENVIRONMENTS.md §4): ``HumanEvalEnv`` (write a
solution, see the failing test output, retry; ``agentrl/HumanEval-v0``) and
``HumanEvalToolsEnv`` (OpenAI tool calls ``run_python`` / ``submit``;
``agentrl/HumanEvalTools-v0``). Every program runs in an ``agentrl_sandboxes`` backend (``sandboxes/``), never
in-process. May import: agentrl.env, agentrl.types, agentrl_sandboxes.
"""

"""``agentrl/HumanEvalTools-v0``: HumanEval through OpenAI-format tool calls.

Tools (schemas in ``agentrl_envs.code.tool_calls.TOOLS``, also in reset ``info["tools"]``):
``run_python(code)`` runs code in the sandbox and returns exit code/stdout/stderr;
``submit(code)`` grades the function against HumanEval's tests (``agentrl_envs.code.grading``;
reward 1.0 on pass, terminated). After ``max_attempts`` failed submissions the episode
terminates (lost); at ``max_turns`` turns it is truncated. An action that is not exactly one valid call is an
invalid action whose observation says what was wrong. Step info carries ``tool_name`` and
``tool_call_id`` (for the ``tool`` message of the reply). Sandbox failures set
``info["env_error"]`` (PITFALLS P8).
"""

from __future__ import annotations

from typing import Sequence

import gymnasium

from agentrl.env.contract import INFO_ANCHOR, INFO_ENV_ERROR, INFO_TASK, INFO_VALID, INFO_WALKTHROUGH, INFO_WON
from agentrl.env.spaces import UnicodeText
from agentrl_envs.code.episode import (SPLITS, canonical_answer, episode_lease, guard_split, list_code_tasks, open_sandbox,
                               pick_task, select_tasks)
from agentrl_envs.code.extract import extract_code
from agentrl_envs.code.grading import grade
from agentrl_envs.code.scoring import describe_failure, run_guarded, tail
from agentrl_envs.code.tasks import CodeTask
from agentrl_envs.code.tool_calls import TOOLS, ToolCallError, parse_tool_call
from agentrl_sandboxes import Sandbox

INSTRUCTIONS = (
    "Implement the following Python function. Use the tool run_python(code) to experiment and "
    "submit(code) with the complete function to be graded ({k} submission(s) allowed).\n\n```python\n{prompt}```"
)
PASSED = "All tests passed."


def format_run(result) -> str:
    """Observation for ``run_python``: exit code, then stdout and stderr tails."""
    status = "timed out" if result.timed_out else ("out of memory" if result.oom else f"exit code {result.exit_code}")
    return f"{status}\nstdout:\n{tail(result.stdout)}\nstderr:\n{tail(result.stderr)}"


class HumanEvalToolsEnv(gymnasium.Env):
    """HumanEval with ``run_python``/``submit`` tool calls (TextEnv contract).

    Args: as ``HumanEvalEnv`` plus ``max_turns`` (turn cap → truncated).
    """

    # exact: tool-call JSON (and the code inside it) reaches step as written
    metadata = {"render_modes": [], "agentrl.check_kwargs": {"task_ids": ["HumanEval/0", "HumanEval/53"]},
                "agentrl.action_normalize": "exact", "agentrl.splits": SPLITS}
    tools = TOOLS

    @classmethod
    def list_tasks(cls, split: str = "all", task_ids: Sequence[str] | None = None, **_: object) -> list:
        """Task-list hook (``agentrl.env.tasks``): the HumanEval problems of ``split``, each
        digested by its prompt, entry point, canonical solution and tests."""
        return list_code_tasks(split, task_ids)

    def __init__(self, *, sandbox: str | Sandbox = "auto", max_attempts: int = 3, max_turns: int = 10,
                 exec_timeout_s: float = 5.0, scoring_timeout_s: float | None = None, memory_mb: int = 1024,
                 episode_deadline_s: float = 1800.0, task_ids: Sequence[str] | None = None,
                 split: str = "all") -> None:
        if max_attempts < 1 or max_turns < 1:
            raise ValueError(f"max_attempts and max_turns must be >= 1, got {max_attempts}, {max_turns}")
        self.observation_space, self.action_space = UnicodeText(), UnicodeText()
        self.max_attempts, self.max_turns = max_attempts, max_turns
        self.exec_timeout_s, self.memory_mb = exec_timeout_s, memory_mb
        self.scoring_timeout_s = scoring_timeout_s if scoring_timeout_s is not None else exec_timeout_s + 20.0
        self.episode_deadline_s = episode_deadline_s
        self.tasks = select_tasks(task_ids, split)
        guard_split(type(self), split, task_ids)
        self.sandbox, self._owns_sandbox = open_sandbox(sandbox)
        self.task: CodeTask | None = None
        self.lease = None
        self._turn = self._submits = 0
        self._done = True

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        """Start an episode (seeded or ``options["task_id"]``); info carries ``tools``."""
        super().reset(seed=seed)
        self.task = pick_task(self.tasks, self.np_random, options)
        self.lease = episode_lease(self.sandbox, deadline_s=self.episode_deadline_s,
                                   scoring_timeout_s=self.scoring_timeout_s)
        self._turn = self._submits = 0
        self._done = False
        walk = '{"name": "submit", "arguments": %s}' % _json({"code": canonical_answer(self.task)})
        return INSTRUCTIONS.format(k=self.max_attempts, prompt=self.task.prompt), {
            INFO_ANCHOR: self.task.prompt, INFO_WON: False, INFO_TASK: self.task.task_id,
            INFO_WALKTHROUGH: [walk], "tools": TOOLS}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        """Execute one tool call.

        Raises:
            RuntimeError: ``step`` before ``reset`` or after the episode ended.
        """
        if self._done or self.task is None:
            raise RuntimeError("step() called on a finished episode; call reset() first")
        self._turn += 1
        cut = self._turn >= self.max_turns
        try:
            call = parse_tool_call(action)
        except ToolCallError as exc:
            obs = (f"Invalid tool call: {exc}. Call exactly one tool, e.g. "
                   '{"name": "run_python", "arguments": {"code": "print(1)"}}')
            self._done = cut
            return obs, 0.0, False, cut, {INFO_ANCHOR: obs, INFO_WON: False, INFO_VALID: False}
        info = {"tool_name": call.name, "tool_call_id": call.call_id}
        code = extract_code(call.code, self.task.entry_point) or call.code
        limits = dict(exec_timeout_s=self.exec_timeout_s, scoring_timeout_s=self.scoring_timeout_s,
                      memory_mb=self.memory_mb)
        graded = grade(self.lease, self.task, code, **limits) if call.name == "submit" else None
        outcome = graded.outcome if graded else run_guarded(self.lease, code, **limits)
        if outcome.infra_error is not None:
            self._done = True
            msg = f"The sandbox failed: {outcome.infra_error}"
            return msg, 0.0, False, True, {**info, INFO_ANCHOR: msg, INFO_WON: False, INFO_VALID: True,
                                           INFO_ENV_ERROR: outcome.infra_error}
        if call.name == "run_python":
            obs = format_run(outcome.result)
            self._done = cut
            return obs, 0.0, False, cut, {**info, INFO_ANCHOR: obs, INFO_WON: False, INFO_VALID: True}
        return self._graded(outcome.result, graded.passed, cut, info)

    def _graded(self, result, passed: bool, cut: bool, info: dict) -> tuple[str, float, bool, bool, dict]:
        self._submits += 1
        if passed:
            self._done = True
            return PASSED, 1.0, True, False, {**info, INFO_ANCHOR: PASSED, INFO_WON: True, INFO_VALID: True}
        feedback = describe_failure(result, self.exec_timeout_s, self.memory_mb)
        lost = self._submits >= self.max_attempts
        self._done = lost or cut
        obs = f"Submission {self._submits} of {self.max_attempts} failed. {feedback}"
        return obs, 0.0, lost, cut and not lost, {**info, INFO_ANCHOR: feedback, INFO_WON: False, INFO_VALID: True}

    def close(self) -> None:
        """Close the sandbox if this env opened it (idempotent)."""
        if self._owns_sandbox and self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None


def _json(obj: object) -> str:
    import json

    return json.dumps(obj)

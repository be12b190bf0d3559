"""``agentrl/HumanEval-v0``: multi-turn HumanEval with test feedback.

reset shows the function to complete; each step is one attempt: the code is extracted from
the answer (markdown fences when present), HumanEval's tests run in the sandbox
(``agentrl_envs.code.grading``: a pass needs the checker's nonce line, never exit status alone),
and a failure's output (e.g. the failing ``assert`` and its traceback) is the next
observation. Reward 1.0 on pass (terminated, won), 0.0 otherwise; after ``max_attempts``
failed attempts the episode terminates (lost). An answer without code is an invalid action
(``action_valid = False``) and uses up an attempt. If the sandbox fails (dead, expired,
hung past the scoring timeout) the step sets ``info["env_error"]`` and truncates: the
episode is an env_error, not a 0 (PITFALLS P8).
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
from agentrl_envs.code.scoring import describe_failure
from agentrl_envs.code.tasks import CodeTask
from agentrl_sandboxes import Sandbox

INSTRUCTIONS = (
    "Complete the following Python function. Answer with the complete function (imports included) "
    "in a ```python code block. You have {k} attempt(s); after a failed attempt you will see the test output.\n\n"
    "```python\n{prompt}```"
)
NO_CODE = "No Python code found in your answer. Reply with the complete function in a ```python ... ``` block."
PASSED = "All tests passed."


class HumanEvalEnv(gymnasium.Env):
    """Multi-turn HumanEval (TextEnv contract, ``agentrl.env.contract``).

    Args:
        sandbox: backend name for ``agentrl_sandboxes.make_sandbox`` (default ``"auto"``; never an
            unisolated run) or a ``Sandbox`` to share between envs.
        max_attempts: attempts per episode (k ≥ 1).
        exec_timeout_s: wall-clock limit of one test run (seconds).
        scoring_timeout_s: hard limit of one sandbox call including start-up (seconds;
            default ``exec_timeout_s + 20``); expiry → ``info["env_error"]``.
        memory_mb: memory limit of a test run (MiB).
        episode_deadline_s: the rollout's episode deadline (seconds); the sandbox lease
            lasts this + ``scoring_timeout_s`` + 30 s.
        task_ids: restrict to these HumanEval ids (default: the whole split).
        split: ``all`` | ``train`` (123 tasks) | ``eval`` (41 tasks, disjoint).
        max_turns: the trainer's turn limit; here the same as ``max_attempts`` (overrides it).
    """

    # exact: code reaches step with every newline and indent
    metadata = {"render_modes": [], "agentrl.check_kwargs": {"task_ids": ["HumanEval/0", "HumanEval/53"]},
                "agentrl.action_normalize": "exact", "agentrl.splits": SPLITS}

    @classmethod
    def list_tasks(cls, split: str = "all", task_ids: Sequence[str] | None = None, **_: object) -> list:
        """Task-list hook (``agentrl.env.tasks``): the HumanEval problems of ``split``, each
        digested by its prompt, entry point, canonical solution and tests."""
        return list_code_tasks(split, task_ids)

    def __init__(self, *, sandbox: str | Sandbox = "auto", max_attempts: int = 3, exec_timeout_s: float = 5.0,
                 scoring_timeout_s: float | None = None, memory_mb: int = 1024, episode_deadline_s: float = 1800.0,
                 task_ids: Sequence[str] | None = None, split: str = "all", max_turns: int | None = None) -> None:
        max_attempts = max_attempts if max_turns is None else max_turns  # one turn = one attempt
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self.observation_space, self.action_space = UnicodeText(), UnicodeText()
        self.max_attempts, self.exec_timeout_s, self.memory_mb = max_attempts, exec_timeout_s, memory_mb
        self.scoring_timeout_s = scoring_timeout_s if scoring_timeout_s is not None else exec_timeout_s + 20.0
        self.episode_deadline_s = episode_deadline_s
        self.tasks = select_tasks(task_ids, split)
        guard_split(type(self), split, task_ids)
        self.sandbox, self._owns_sandbox = open_sandbox(sandbox)
        self.task: CodeTask | None = None
        self.lease = None
        self._attempt, self._done = 0, True

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        """Start an episode on a seeded (or ``options["task_id"]``) task; opens the lease."""
        super().reset(seed=seed)
        self.task = pick_task(self.tasks, self.np_random, options)
        self.lease = episode_lease(self.sandbox, deadline_s=self.episode_deadline_s,
                                   scoring_timeout_s=self.scoring_timeout_s)
        self._attempt, self._done = 0, False
        obs = INSTRUCTIONS.format(k=self.max_attempts, prompt=self.task.prompt)
        return obs, {INFO_ANCHOR: self.task.prompt, INFO_WON: False, INFO_TASK: self.task.task_id,
                     INFO_WALKTHROUGH: [canonical_answer(self.task)]}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        """One attempt: extract the code, run the tests, answer with the verdict.

        Raises:
            RuntimeError: ``step`` before ``reset`` or after the episode ended.
        """
        if self._done or self.task is None:
            raise RuntimeError("step() called on a finished episode; call reset() first")
        self._attempt += 1
        last = self._attempt >= self.max_attempts
        code = extract_code(action, self.task.entry_point)
        if code is None:
            self._done = last
            return NO_CODE, 0.0, last, False, {INFO_ANCHOR: NO_CODE, INFO_WON: False, INFO_VALID: False}
        graded = grade(self.lease, self.task, code, exec_timeout_s=self.exec_timeout_s,
                       scoring_timeout_s=self.scoring_timeout_s, memory_mb=self.memory_mb)
        outcome = graded.outcome
        if outcome.infra_error is not None:
            self._done = True
            msg = f"The code could not be scored (sandbox failure): {outcome.infra_error}"
            return msg, 0.0, False, True, {INFO_ANCHOR: msg, INFO_WON: False, INFO_VALID: True,
                                           INFO_ENV_ERROR: outcome.infra_error}
        if graded.passed:
            self._done = True
            return PASSED, 1.0, True, False, {INFO_ANCHOR: PASSED, INFO_WON: True, INFO_VALID: True}
        feedback = describe_failure(outcome.result, self.exec_timeout_s, self.memory_mb)
        self._done = last
        more = "" if last else "\nFix the function and answer with the complete corrected code."
        obs = f"Attempt {self._attempt} of {self.max_attempts} failed. {feedback}{more}"
        return obs, 0.0, last, False, {INFO_ANCHOR: feedback, INFO_WON: False, INFO_VALID: True}

    def close(self) -> None:
        """Close the sandbox if this env opened it (idempotent)."""
        if self._owns_sandbox and self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None

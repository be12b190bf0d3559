"""Task lists of env splits: the env-side hook that held-out panels are drawn from.

An env class declares its tasks with a classmethod ``list_tasks(split, **constructor_kwargs)``
(``TASKS_HOOK``) returning ``TaskRef(task_id, digest)`` for every task of ``split`` under
those kwargs, without building an env:

- ``task_id`` is what ``reset(options={"task_id": ...})`` plays (machine-independent:
  ALFWorld's game folder, WebShop's ``synthetic/<goal index>``, ``HumanEval/<k>``, a
  TextWorld game key, a toy layout);
- ``digest`` is the hex SHA-256 of the task's *content* (the game file's bytes, the goal's
  text and target, the problem's prompt and tests, the generator spec and seed), never of
  its id, so a changed data folder changes the digest of the task it changed, and two ids
  naming the same content are caught.

``tasks_of(env_id, split, **kwargs)`` calls the hook with the registration's kwargs merged
under the caller's (as ``gymnasium.make`` does) and keeps the first task of each digest (a
split that lists one content twice counts it once). ``check_split_disjoint`` is what every
env constructor calls: the ``train`` split shares no task id and no digest with any other
declared split (``"all"`` excepted), else ``SplitOverlapError``. A train env asked by
``reset`` for a task outside its split raises (each env checks the id against its split).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import gymnasium
from gymnasium.envs.registration import load_env_creator

from agentrl.env.contract import DataMissingError
from agentrl.env.registry import validate_id

__all__ = ["TASKS_HOOK", "TRAIN_SPLIT", "TaskRef", "SplitOverlapError", "content_digest", "unique_by_digest",
           "env_class", "tasks_of", "has_task_list", "check_split_disjoint", "split_names"]

#: optional classmethod of an env class: ``list_tasks(split, **constructor_kwargs) -> list[TaskRef]``.
TASKS_HOOK = "list_tasks"
#: the split training draws from; it must be disjoint from every other split but ``"all"``.
TRAIN_SPLIT = "train"
_UNION_SPLIT = "all"


@dataclass(frozen=True, order=True)
class TaskRef:
    """One task of a split: the id ``reset`` plays and the SHA-256 of its content."""

    task_id: str
    digest: str


class SplitOverlapError(ValueError):
    """The train split shares tasks (by id or by content digest) with a held-out split."""


def content_digest(content: object) -> str:
    """Hex SHA-256 of ``content``: bytes as they are, anything else as canonical JSON
    (sorted keys, no whitespace, UTF-8)."""
    raw = content if isinstance(content, bytes) else json.dumps(
        content, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(raw).hexdigest()


def unique_by_digest(refs: Iterable[TaskRef]) -> tuple[TaskRef, ...]:
    """``refs`` in order, without a task whose id or digest an earlier one has."""
    seen_ids, seen_digests, out = set(), set(), []
    for r in refs:
        if r.task_id in seen_ids or r.digest in seen_digests:
            continue
        seen_ids.add(r.task_id)
        seen_digests.add(r.digest)
        out.append(r)
    return tuple(out)


def env_class(env_id: str):
    """The class (or factory) registered as ``env_id``, imported without building an env."""
    spec = gymnasium.spec(validate_id(env_id))
    return spec.entry_point if callable(spec.entry_point) else load_env_creator(spec.entry_point)


def has_task_list(env_id: str) -> bool:
    """Whether the env class of ``env_id`` defines the ``list_tasks`` hook."""
    return callable(getattr(env_class(env_id), TASKS_HOOK, None))


def tasks_of(env_id: str, split: str, kwargs: Mapping | None = None) -> tuple[TaskRef, ...]:
    """The distinct tasks of ``split`` of ``env_id`` built with ``kwargs`` (registration
    kwargs merged under them; ``split`` replaces any in ``kwargs``), in the env's order.

    Raises:
        TypeError: the env has no ``list_tasks`` hook (the message says what to add).
        ValueError / DataMissingError: as the hook (unknown split, missing data).
    """
    creator = env_class(env_id)
    hook = getattr(creator, TASKS_HOOK, None)
    if not callable(hook):
        raise TypeError(f"env {env_id} does not list its tasks: add a classmethod {TASKS_HOOK}(split, **kwargs) "
                        "returning agentrl.env.tasks.TaskRef(task_id, content digest) for every task of the split "
                        "(docs/envs.md, 'Task lists and panels')")
    merged = {**dict(gymnasium.spec(env_id).kwargs or {}), **dict(kwargs or {}), "split": split}
    refs = unique_by_digest(hook(**merged))
    if not refs:
        raise ValueError(f"split {split!r} of {env_id} has no tasks (kwargs {dict(kwargs or {})})")
    return refs


def split_names(env_cls) -> tuple[str, ...]:
    """The splits an env class declares (``metadata["agentrl.splits"]``), ``()`` if none."""
    return tuple((getattr(env_cls, "metadata", None) or {}).get("agentrl.splits", ()))


def check_split_disjoint(env_cls, split: str, kwargs: Mapping | None = None,
                         splits: Iterable[str] | None = None) -> tuple[TaskRef, ...]:
    """What env constructors call: the tasks of ``split`` (``env_cls.list_tasks``), after
    checking that the train split shares no task id and no content digest with any other
    split of ``splits`` (default: the class's declared splits) other than ``"all"``.

    ``split="all"`` checks train against the others too (the union overlaps every split by
    definition, so it is never compared itself). Returns the (distinct) tasks of ``split``.

    Raises:
        SplitOverlapError: shared tasks (names the splits, the count and examples).
    """
    kwargs = {k: v for k, v in dict(kwargs or {}).items() if k != "split"}
    names = [s for s in (splits if splits is not None else split_names(env_cls)) if s != _UNION_SPLIT]
    listed = {split: unique_by_digest(env_cls.list_tasks(split=split, **kwargs))}
    for other in names:
        if other not in listed:
            try:
                listed[other] = unique_by_digest(env_cls.list_tasks(split=other, **kwargs))
            except DataMissingError:  # that split's data is absent here: it shares nothing
                listed[other] = ()
    if TRAIN_SPLIT in listed:
        train = listed[TRAIN_SPLIT]
        train_ids, train_digests = {r.task_id for r in train}, {r.digest for r in train}
        for other in sorted(set(listed) - {TRAIN_SPLIT, _UNION_SPLIT}):
            shared = [r for r in listed[other] if r.task_id in train_ids or r.digest in train_digests]
            if shared:
                raise SplitOverlapError(
                    f"{env_cls.__name__}: the train split shares {len(shared)} task(s) with split {other!r} "
                    f"(by id or content digest), e.g. {[r.task_id for r in shared[:3]]}; held-out results would "
                    "include trained-on tasks. Fix the data (remove the duplicates from the train split)")
    return listed[split]

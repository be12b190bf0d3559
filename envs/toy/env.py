"""``agentrl/Toy-v0``: fetch the key, open the door — a tiny deterministic text game.

The task (number of rooms 3..5, key room, door room) is drawn from the reset seed. The agent
starts in room 1. Observations are pure functions of the state and the action's effect
(e.g. the same room text every time the agent enters that room), so rollouts revisit
identical ``anchor_obs`` strings — what GiGPO-style anchor groups need (ALGORITHMS.md §0.4).

Actions (exact text after stripping surrounding whitespace): ``go east``, ``go west``,
``take key``, ``open door``, ``look``, ``inventory``; only those possible in the current
state are admissible. Anything else answers ``"Nothing happens."`` with
``action_valid=False`` (ALFWorld's convention). Reward 1.0 when the door is opened with the
key (terminated, won); ``max_turns`` turns without winning → truncated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import gymnasium

from agentrl.env import (INFO_ADMISSIBLE, INFO_ANCHOR, INFO_TASK, INFO_VALID, INFO_WALKTHROUGH,
                         INFO_WON, text_spaces)
from agentrl.env.tasks import TaskRef, check_split_disjoint, content_digest

_TASK_RE = re.compile(r"^rooms(\d+)-key(\d+)-door(\d+)$")
NOTHING = "Nothing happens."


@dataclass(frozen=True)
class ToyTask:
    """A layout: ``n_rooms`` rooms in a row (0-based indices), key and door positions."""

    n_rooms: int
    key_room: int
    door_room: int

    @property
    def task_id(self) -> str:
        return f"rooms{self.n_rooms}-key{self.key_room}-door{self.door_room}"

    @classmethod
    def parse(cls, task_id: str) -> "ToyTask":
        """Inverse of ``task_id``. Raises ValueError on a malformed or impossible id."""
        m = _TASK_RE.match(task_id)
        if not m:
            raise ValueError(f"bad toy task_id {task_id!r}; expected e.g. 'rooms4-key2-door0'")
        n, k, d = map(int, m.groups())
        if not (2 <= n and 0 <= k < n and 0 <= d < n and k != 0 and k != d):
            raise ValueError(f"impossible toy task {task_id!r}: need n>=2, 0<key<n, 0<=door<n, key!=door")
        return cls(n, k, d)

    def walkthrough(self) -> list[str]:
        """Shortest winning action list from room 0."""
        east = ["go east"] * self.key_room
        back = ["go east" if self.door_room > self.key_room else "go west"] * abs(self.door_room - self.key_room)
        return east + ["take key"] + back + ["open door"]


SPLITS = ("all", "train", "eval")


def split_tasks(min_rooms: int, max_rooms: int, split: str) -> list[ToyTask]:
    """Every layout with ``min_rooms..max_rooms`` rooms in a fixed order; ``eval`` keeps
    every 4th one, ``train`` the others (disjoint), ``all`` all of them."""
    tasks = [ToyTask(n, k, d) for n in range(min_rooms, max_rooms + 1) for k in range(1, n) for d in range(n) if d != k]
    if split == "all":
        return tasks
    return [t for i, t in enumerate(tasks) if (i % 4 == 3) == (split == "eval")]


def task_ref(task: ToyTask) -> TaskRef:
    """The task's id and the digest of its layout (``agentrl.env.tasks``)."""
    return TaskRef(task.task_id, content_digest({"n_rooms": task.n_rooms, "key_room": task.key_room,
                                                 "door_room": task.door_room}))


class ToyEnv(gymnasium.Env):
    """Key-and-door corridor (see module docstring).

    Args:
        max_turns: turn limit (truncation), default 12.
        min_rooms / max_rooms: range of corridor lengths drawn per task (inclusive).
        split: ``"train"`` (3 of every 4 layouts), ``"eval"`` (every 4th layout, disjoint
            from train) or ``"all"``; the seed draws a layout of the split, and
            ``options["task_id"]`` must name one of the split.
    Raises:
        ValueError: bad room range or unknown split.
    """

    # commands are matched against the admissible list: the loop collapses whitespace first
    metadata = {"render_modes": [], "agentrl.check_kwargs": {}, "agentrl.action_normalize": "whitespace",
                "agentrl.splits": SPLITS}

    @classmethod
    def list_tasks(cls, split: str = "all", min_rooms: int = 3, max_rooms: int = 5, **_: object) -> list[TaskRef]:
        """Task-list hook (``agentrl.env.tasks``): every layout of ``split``."""
        if split not in SPLITS:
            raise ValueError(f"unknown toy split {split!r}; choose one of {SPLITS}")
        return [task_ref(t) for t in split_tasks(min_rooms, max_rooms, split)]

    def __init__(self, max_turns: int = 12, min_rooms: int = 3, max_rooms: int = 5, split: str = "all") -> None:
        if not 2 <= min_rooms <= max_rooms:
            raise ValueError(f"need 2 <= min_rooms <= max_rooms, got {min_rooms}, {max_rooms}")
        if split not in SPLITS:
            raise ValueError(f"unknown toy split {split!r}; choose one of {SPLITS}")
        self.split = split
        check_split_disjoint(type(self), split, {"min_rooms": min_rooms, "max_rooms": max_rooms}, SPLITS)
        self._tasks = split_tasks(min_rooms, max_rooms, split)
        self._by_id = {t.task_id: t for t in self._tasks}
        self.observation_space, self.action_space = text_spaces()
        self.max_turns, self.min_rooms, self.max_rooms = max_turns, min_rooms, max_rooms
        self.task: ToyTask | None = None

    def _draw_task(self) -> ToyTask:
        return self._tasks[int(self.np_random.integers(len(self._tasks)))]

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        tid = (options or {}).get(INFO_TASK)
        self.task = self._task(str(tid)) if tid else self._draw_task()
        self.room, self.has_key, self.turns, self.done, self._won = 0, False, 0, False, False
        obs = self._room_text()
        return obs, {INFO_ANCHOR: obs, INFO_ADMISSIBLE: self._admissible(), INFO_WON: False,
                     INFO_TASK: self.task.task_id, INFO_WALKTHROUGH: self.task.walkthrough()}

    def _task(self, task_id: str) -> ToyTask:
        """The layout ``task_id`` of this env's split. Raises ValueError for a malformed id or
        one of another split (a train env never plays an eval layout)."""
        task = ToyTask.parse(task_id)
        if task.task_id not in self._by_id:
            raise ValueError(f"toy task {task_id!r} is not in split {self.split!r} (rooms {self.min_rooms}.."
                             f"{self.max_rooms}: {len(self._tasks)} layouts, e.g. {self._tasks[0].task_id!r})")
        return task

    def snapshot(self) -> dict:
        """The full game state as a small JSON-able dict (fast branching,
        ``agentrl.rollout.branching.snapshot_env``); ``restore`` puts it back."""
        if self.task is None:
            raise RuntimeError("ToyEnv.snapshot called before reset()")
        return {"task": self.task.task_id, "room": self.room, "has_key": self.has_key, "turns": self.turns,
                "done": self.done, "won": self._won}

    def restore(self, snapshot: dict) -> None:
        """Restore a ``snapshot()`` state (the seed's RNG stream is not part of it: the
        toy game draws randomness only at reset)."""
        self.task = ToyTask.parse(snapshot["task"])
        self.room, self.has_key, self.turns = int(snapshot["room"]), bool(snapshot["has_key"]), int(snapshot["turns"])
        self.done, self._won = bool(snapshot["done"]), bool(snapshot["won"])

    def _room_text(self) -> str:
        t = self.task
        parts = [f"You are in room {self.room + 1} of {t.n_rooms}."]
        if self.room == t.key_room and not self.has_key:
            parts.append("A key lies on the floor.")
        if self.room == t.door_room:
            parts.append("There is a locked door in the north wall.")
        return " ".join(parts)

    def _admissible(self) -> list[str]:
        acts = []
        if self.room < self.task.n_rooms - 1:
            acts.append("go east")
        if self.room > 0:
            acts.append("go west")
        if self.room == self.task.key_room and not self.has_key:
            acts.append("take key")
        if self.room == self.task.door_room:
            acts.append("open door")
        return acts + ["inventory", "look"]

    def _effect(self, action: str) -> tuple[str, bool]:
        """Apply a valid action; returns (observation, won)."""
        if action in ("go east", "go west"):
            self.room += 1 if action == "go east" else -1
            return self._room_text(), False
        if action == "take key":
            self.has_key = True
            return "You take the key.", False
        if action == "open door":
            if self.has_key:
                return "You unlock the door with the key and step through. You won!", True
            return "The door is locked.", False
        if action == "inventory":
            return "You are carrying: a key." if self.has_key else "You are carrying nothing.", False
        return self._room_text(), False  # look

    def step(self, action: str):
        if self.task is None:
            raise RuntimeError("ToyEnv.step called before reset()")
        if self.done:
            obs, valid, won = "The episode is over; call reset().", False, self._won
        else:
            act = action.strip() if isinstance(action, str) else ""
            valid = act in self._admissible()
            obs, won = self._effect(act) if valid else (NOTHING, False)
            self._won = won
            self.turns += 1
        terminated = won
        truncated = not terminated and self.turns >= self.max_turns
        self.done = terminated or truncated
        info = {INFO_ANCHOR: obs, INFO_ADMISSIBLE: [] if self.done else self._admissible(),
                INFO_WON: won, INFO_VALID: valid}
        return obs, 1.0 if (won and valid) else 0.0, terminated, truncated, info

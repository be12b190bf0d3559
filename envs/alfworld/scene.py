"""Sample an ALFWorld task and write it as a PDDL problem (ENVIRONMENTS.md §2.5 recipe).

Scene vocabulary comes from the alfworld wheel: ``alfworld/gen/layouts/FloorPlan*-objects.json``
(object and receptacle classes per floorplan, 120 scenes), ``FloorPlan*-openable.json``
(openable receptacle instances), ``alfworld.gen.constants`` (``VAL_RECEPTACLE_OBJECTS``,
``VAL_ACTION_OBJECTS``, ``OPENABLE_CLASS_LIST``) and goal templates from
``alfworld.gen.goal_library.gdict``. Nothing here calls the planner (see ``generate``).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from agentrl.env.contract import require_module

LAMPS = ("DeskLamp", "FloorLamp")
LAMP_HOLDERS = ("Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable", "DiningTable", "Ottoman")
MULTI = frozenset({"Cabinet", "Drawer", "CounterTop", "Shelf", "SideTable", "DiningTable", "Desk",
                   "Dresser", "ArmChair", "StoveBurner", "GarbageCan", "Safe", "TowelHolder"})
NEEDS = {"pick_clean_then_place_in_recep": ("Cleanable", "SinkBasin"),
         "pick_heat_then_place_in_recep": ("Heatable", "Microwave"),
         "pick_cool_then_place_in_recep": ("Coolable", "Fridge")}


@dataclass
class Task:
    """A sampled task: scene, goal classes and the instance layout.

    Attributes:
        task_type: one of ``agentrl_envs.alfworld.data.TASK_TYPES``.
        scene_num: ALFRED floorplan number (``FloorPlan<scene_num>``).
        obj, recep, toggle: goal classes (``toggle`` = lamp class for look tasks, else ``""``).
        goal: goal sentence, e.g. ``"put a mug in desk"``.
        receptacles: receptacle id → class.  objects: object id → (class, receptacle id).
    """

    task_type: str
    scene_num: int
    obj: str
    recep: str
    toggle: str
    goal: str
    receptacles: dict[str, str] = field(default_factory=dict)
    objects: dict[str, tuple[str, str]] = field(default_factory=dict)


@lru_cache(maxsize=1)
def vocabulary() -> tuple[dict[int, frozenset[str]], dict[int, dict[str, int]]]:
    """``(classes per scene, openable instance counts per scene)`` read from the wheel."""
    gen = require_module("alfworld.gen", "alfworld")
    layouts = Path(gen.__file__).parent / "layouts"
    classes, openable = {}, {}
    for path in sorted(layouts.glob("FloorPlan*-objects.json")):
        num = int(path.name[len("FloorPlan"):].split("-")[0])
        classes[num] = frozenset(json.loads(path.read_text()))
        op = layouts / f"FloorPlan{num}-openable.json"
        counts: dict[str, int] = {}
        for rid in json.loads(op.read_text()) if op.is_file() else []:
            counts[rid.split("|")[0]] = counts.get(rid.split("|")[0], 0) + 1
        openable[num] = counts
    return classes, openable


def _const():
    return require_module("alfworld.gen.constants", "alfworld")


def static_receptacles() -> list[str]:
    """Receptacle classes that are fixed in the room (not pickupable containers)."""
    c = _const()
    return sorted(set(c.VAL_RECEPTACLE_OBJECTS) - set(c.MOVABLE_RECEPTACLES))


def _ident(cls: str, rng: random.Random) -> str:
    """ALFRED-style id ``Mug_bar__minus_02_dot_05_bar__plus_01_dot_35_bar__plus_00_dot_20``."""
    parts = []
    for _ in range(3):
        v = rng.uniform(-9.99, 9.99)
        parts.append(("_plus_" if v >= 0 else "_minus_") + f"{abs(v):05.2f}".replace(".", "_dot_"))
    if cls.endswith("Basin"):  # ALFRED: Sink_bar_..._bar_SinkBasin, demangled to "sinkbasin"
        return cls[: -len("Basin")] + "".join("_bar_" + p for p in parts) + "_bar_" + cls
    return cls + "".join("_bar_" + p for p in parts)


def _choices(task_type: str, scene: frozenset[str]) -> list[tuple[str, str, str]]:
    """All (object class, goal receptacle class, lamp class) that the scene supports."""
    c = _const()
    recs = [r for r in static_receptacles() if r in scene]
    movable = sorted(o for o in scene if o in c.OBJECTS and o not in recs and o not in LAMPS
                     and any(o in c.VAL_RECEPTACLE_OBJECTS[r] for r in recs))
    if task_type == "look_at_obj_in_light":
        lamps = [lamp for lamp in LAMPS if lamp in scene]
        if not lamps or not any(h in scene for h in LAMP_HOLDERS):
            return []
        return [(o, "", lamp) for o in movable for lamp in lamps]
    action, tool = NEEDS.get(task_type, (None, None))
    if tool and tool not in scene:
        return []
    ok = [o for o in movable if action is None or o in c.VAL_ACTION_OBJECTS[action]]
    return [(o, r, "") for o in ok for r in recs if o in c.VAL_RECEPTACLE_OBJECTS[r] and r != tool]


def sample_task(task_type: str, rng: random.Random, max_receptacles: int = 12, n_distractors: int = 8) -> Task:
    """Sample one task of ``task_type`` in a random scene that supports it.

    Receptacles: every static receptacle class of the scene (openable ones with the
    scene's instance count, others 1–2), down-sampled to ``max_receptacles`` while keeping
    the goal receptacle and the tool (sink basin, microwave, fridge, lamp holder).
    Raises ``ValueError`` for an unknown task type.
    """
    gdict = require_module("alfworld.gen.goal_library", "alfworld").gdict
    if task_type not in gdict:
        raise ValueError(f"unknown ALFWorld task type {task_type!r}")
    classes, openable = vocabulary()
    scenes = [s for s in sorted(classes) if _choices(task_type, classes[s])]
    scene_num = rng.choice(scenes)
    obj, recep, toggle = rng.choice(_choices(task_type, classes[scene_num]))
    template = rng.choice(gdict[task_type]["templates"])
    goal = template.format(obj=obj.lower(), recep=recep.lower(), toggle=toggle.lower(), mrecep="")
    task = Task(task_type, scene_num, obj, recep, toggle, goal)
    _place_receptacles(task, classes[scene_num], openable[scene_num], rng, max_receptacles)
    _place_objects(task, classes[scene_num], rng, n_distractors)
    return task


def _place_receptacles(task: Task, scene: frozenset[str], openable: dict[str, int],
                       rng: random.Random, limit: int) -> None:
    recs = [r for r in static_receptacles() if r in scene]
    keep = {task.recep, NEEDS.get(task.task_type, ("", ""))[1]}
    if task.toggle:
        keep.add(rng.choice([h for h in LAMP_HOLDERS if h in scene]))
    keep.discard("")
    others = [r for r in recs if r not in keep]
    rng.shuffle(others)
    for cls in sorted(keep) + sorted(others[: max(0, limit - len(keep))]):
        for _ in range(openable.get(cls) or (rng.randint(1, 3) if cls in MULTI else 1)):
            task.receptacles[_ident(cls, rng)] = cls


def _place_objects(task: Task, scene: frozenset[str], rng: random.Random, n_distractors: int) -> None:
    c = _const()
    rec_ids = sorted(task.receptacles)

    def holders(cls: str, avoid: str = "") -> list[str]:
        if cls in LAMPS:
            return [r for r in rec_ids if task.receptacles[r] in LAMP_HOLDERS]
        return [r for r in rec_ids if cls in c.VAL_RECEPTACLE_OBJECTS[task.receptacles[r]]
                and task.receptacles[r] != avoid]

    def put(cls: str, avoid: str = "") -> None:
        spots = holders(cls, avoid) or holders(cls)
        if spots:
            task.objects[_ident(cls, rng)] = (cls, rng.choice(spots))

    n_target = 2 if task.task_type == "pick_two_obj_and_place" else 1
    for _ in range(n_target + rng.randint(0, 1)):
        put(task.obj, avoid=task.recep)
    if task.toggle:
        put(task.toggle)
    pool = sorted(o for o in scene if o in c.OBJECTS and o not in (task.obj, *LAMPS) and holders(o))
    for cls in rng.sample(pool, min(n_distractors, len(pool))):
        put(cls)

"""Paraphrased room texts of ``agentrl/JunctionMaze-v0`` (``paraphrase=1``; see ``env.py``).

Each non-terminal room of a maze has a *bank* of ``size`` distinct wordings (``bank``). A wording
is built from the room's facts (``RoomFacts``: where it is, its exits, the junction's cue word and
the voice's hint) out of sentence blocks, each written by one of a few templates:

- the location (``You are at junction 2 of 5.``, ``This is junction 2 of 5.``, ...; a corridor
  room keeps ``room i of n`` and its junction ``j of k``, the entrance keeps the entrance and ``k``);
- the exits (``Exits: north, east.``, ``You can head north or east.``, ...: every exit word, never
  the word ``go``, so the only ``go <exit>`` of a text is the voice's);
- at a junction, the sign with the cue word in quotes (``A sign reads 'amber'.``, ...) followed,
  for a hinted cue, by the voice with the literal hint ``go <right exit>``;
- 0, 1 or 2 distractor objects (``There is a rusty key here.``): none is a cue word, an exit
  word or ``go``.

The blocks appear in one of their orders (all permutations). Wording ``b`` of a bank is the
``b``-th distinct text of a stream of draws seeded by ``(maze task id, state id)`` only, so it is
the same in every process and for every bank size (a bank of 8 is the first 8 of a bank of 16),
and all wordings of a bank differ. Wordings of two rooms of one maze never coincide (their
location blocks differ). Terminal rooms (dead ends, goal) have no bank; the env shows their
canonical text.

Pure Python + hashlib + NumPy; nothing here depends on the env's RNG.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from agentrl_envs.junction.maze import CORRIDOR, EXITS, WORDS, Maze

#: the largest bank the env accepts (``paraphrase_bank``); every room has thousands of wordings.
MAX_BANK = 1024
_TAG = 0x50415241  # seeds the wording streams ("PARA")

_START = (
    "You are at the entrance of a maze with {k} junction{s}.",
    "You stand at the entrance of a maze that has {k} junction{s}.",
    "This is the entrance of a maze with {k} junction{s}.",
    "You have just come in by the entrance of a maze; it has {k} junction{s}.",
    "The maze begins here, at its entrance; {k} junction{s} lie ahead.",
)
_FILLER = (
    "You are in a corridor, room {i} of {n} before junction {j} of {k}.",
    "This is corridor room {i} of {n} on the way to junction {j} of {k}.",
    "You walk along a corridor: room {i} of {n} before junction {j} of {k}.",
    "A corridor room ({i} of {n}) leads toward junction {j} of {k}.",
    "You are in room {i} of {n} of the corridor before junction {j} of {k}.",
)
_JUNCTION = (
    "You are at junction {j} of {k}.",
    "This is junction {j} of {k}.",
    "You reach junction {j} of {k}.",
    "You stand at junction {j} of {k} of the maze.",
    "Junction {j} of {k} opens around you.",
)
_EXITS = (
    "Exits: {comma}.",
    "You can head {or_}.",
    "Ways out: {comma}.",
    "Passages lead {or_}.",
    "Openings lie to the {and_}.",
)
_SIGN = (
    "A sign reads '{cue}'.",
    "A sign on the wall says '{cue}'.",
    "Someone has painted '{cue}' on a signpost.",
    "A small plaque shows the word '{cue}'.",
    "Carved above the passages is the word '{cue}'.",
)
_VOICE = (
    "A voice says: go {right}.",
    "A voice whispers: go {right}.",
    "You hear a voice say: go {right}.",
    "From somewhere a voice calls: go {right}.",
)
#: distractor objects (checked below: no cue word, exit word or "go" among their words).
OBJECTS = (
    "a broken chair", "an old boot", "a pile of leaves", "a rusty key", "a wooden crate", "a coil of rope",
    "a cracked mirror", "a dusty rug", "a tin cup", "a straw hat", "a candle stub", "a stone bench",
    "an empty barrel", "a bundle of sticks", "a clay pot", "a torn blanket",
)
_ONE = ("There is {a} here.", "{A} lies on the floor.", "You notice {a} nearby.")
_TWO = ("There are {a} and {b} here.", "{A} and {b} lie in a corner.", "You notice {a} and {b} nearby.")


def _check_objects() -> None:
    banned = set(WORDS) | set(EXITS) | {"go"}
    bad = [o for o in OBJECTS if banned & set(o.split())]
    if bad:  # pragma: no cover - a guard on the constant above
        raise AssertionError(f"distractor objects {bad} contain a cue word, an exit word or 'go'")


_check_objects()


@dataclass(frozen=True)
class RoomFacts:
    """What every wording of a room keeps: ``kind`` (``start``/``filler``/``junction``), ``k``,
    the corridor position ``i`` of ``n`` before junction ``j`` (filler) or the junction ``j``,
    ``exits`` (in the maze's order), and at a junction ``cue`` and ``hint`` (the right exit when
    the cue is hinted, else ``""``)."""

    kind: str
    k: int
    exits: tuple[str, ...]
    j: int = 0
    i: int = 0
    n: int = 0
    cue: str = ""
    hint: str = ""


def room_facts(maze: Maze, state: str) -> RoomFacts:
    """The facts of non-terminal room ``state`` (``Maze.graph`` state ids ``r{j}.{i}``, ``j{j}``).

    Raises:
        KeyError: ``state`` is not a non-terminal room of ``maze``.
    """
    try:
        if state.startswith("r"):
            j, i = (int(x) for x in state[1:].split("."))
            corridor = maze.corridors[j - 1]
            if not 1 <= j <= maze.k or not 1 <= i <= len(corridor):
                raise ValueError
            kind = "start" if (j, i) == (1, 1) else "filler"
            return RoomFacts(kind, maze.k, (CORRIDOR[corridor[i - 1]],), j, i, len(corridor))
        if state.startswith("j"):
            j = int(state[1:])
            if not 1 <= j <= maze.k:
                raise ValueError
            hint = maze.right_exit(j) if maze.hinted(j) else ""
            return RoomFacts("junction", maze.k, EXITS[: maze.n_exits], j, cue=maze.cue(j), hint=hint)
    except (ValueError, IndexError):
        pass
    raise KeyError(f"{state!r} is not a non-terminal room of junction maze {maze.task_id!r} (rooms: r<j>.<i>, j<j>)")


def _exit_forms(exits: tuple[str, ...]) -> dict[str, str]:
    if len(exits) == 1:
        return {"comma": exits[0], "or_": exits[0], "and_": exits[0]}
    head = ", ".join(exits[:-1])
    return {"comma": ", ".join(exits), "or_": f"{head} or {exits[-1]}", "and_": f"{head} and {exits[-1]}"}


def _cap(text: str) -> str:
    return text[0].upper() + text[1:]


def compose(facts: RoomFacts, choice: tuple[int, ...]) -> str:
    """The wording of ``facts`` for one ``choice`` = (location template, exits template, sign
    template, voice template, number of distractors 0..2, first object, second object,
    distractor template, order index): blocks joined by spaces in permutation ``order`` of
    ``itertools.permutations`` over the blocks present. Indices wrap (modulo their ranges)."""
    loc_t, exit_t, sign_t, voice_t, n_obj, o1, o2, obj_t, order = choice
    plural = "s" if facts.k > 1 else ""
    loc = {"start": _START, "filler": _FILLER, "junction": _JUNCTION}[facts.kind]
    blocks = [loc[loc_t % len(loc)].format(k=facts.k, s=plural, i=facts.i, n=facts.n, j=facts.j),
              _EXITS[exit_t % len(_EXITS)].format(**_exit_forms(facts.exits))]
    if facts.kind == "junction":
        sign = _SIGN[sign_t % len(_SIGN)].format(cue=facts.cue)
        blocks.append(sign + (" " + _VOICE[voice_t % len(_VOICE)].format(right=facts.hint) if facts.hint else ""))
    if n_obj % 3 == 1:
        a = OBJECTS[o1 % len(OBJECTS)]
        blocks.append(_ONE[obj_t % len(_ONE)].format(a=a, A=_cap(a)))
    elif n_obj % 3 == 2:
        a, b = OBJECTS[o1 % len(OBJECTS)], OBJECTS[o2 % len(OBJECTS)]
        if a == b:
            b = OBJECTS[(o2 + 1) % len(OBJECTS)]
        blocks.append(_TWO[obj_t % len(_TWO)].format(a=a, b=b, A=_cap(a)))
    perms = list(itertools.permutations(range(len(blocks))))
    return " ".join(blocks[p] for p in perms[order % len(perms)])


def _stream_seed(task_id: str, state: str) -> list[int]:
    digest = hashlib.sha256(f"{task_id}|{state}".encode()).digest()
    return [_TAG] + [int.from_bytes(digest[i:i + 4], "little") for i in range(0, 16, 4)]


@lru_cache(maxsize=4096)
def bank(task_id: str, state: str, size: int) -> tuple[str, ...]:
    """The ``size`` distinct wordings of non-terminal room ``state`` of maze ``task_id``, in bank
    order (wording ``b`` does not depend on ``size``: see the module docstring).

    Raises:
        ValueError: ``size`` outside ``1..MAX_BANK``, or a malformed task id (``Maze.parse``).
        KeyError: ``state`` is not a non-terminal room of the maze.
    """
    if not isinstance(size, int) or not 1 <= size <= MAX_BANK:
        raise ValueError(f"paraphrase bank size must be an int in 1..{MAX_BANK}, got {size!r}")
    facts = room_facts(Maze.parse(task_id), state)
    rng = np.random.default_rng(_stream_seed(task_id, state))
    out: dict[str, None] = {}
    for _ in range(200 * size):
        out.setdefault(compose(facts, tuple(int(x) for x in rng.integers(0, 1 << 20, size=9))), None)
        if len(out) == size:
            return tuple(out)
    raise ValueError(f"room {state!r} of {task_id!r} has fewer than {size} distinct wordings")  # pragma: no cover


def draw(bank_size: int, member: int, group: int, rng: np.random.Generator) -> int:
    """A bank index drawn uniformly from member ``member``'s slice ``{b < bank_size : b % group ==
    member}`` (the whole bank for ``group = 1``); the caller checks ``0 <= member < group <=
    bank_size``."""
    return member + group * int(rng.integers(len(range(member, bank_size, group))))

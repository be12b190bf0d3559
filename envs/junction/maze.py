"""Mazes of ``agentrl/JunctionMaze-v0``: the per-junction cue tables, one maze's layout, its
``TaskGraph`` and texts, and the task lists of the splits (see ``env.py`` for the game).

A maze with ``k`` junctions is ``k`` segments; segment ``j`` (1-based) is a corridor of 1 or 2
rooms, each with one onward move (a compass direction drawn per maze), followed by junction ``j``,
whose sign shows cue ``cues[j-1]`` of junction ``j``'s table (after the exits; a hinted cue's
sign is followed by a voice naming the right exit, ``hinted_cues``). The first room of segment 1 is the
start. The right exit of junction ``j < k`` leads into segment ``j + 1``, that of junction ``k``
into the goal; every wrong exit leads into a dead end (terminal).
"""

from __future__ import annotations

import hashlib
import itertools
import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from agentrl.env import TaskGraph
from agentrl.env.tasks import TaskRef, content_digest

#: cue words (single common words); each junction's table draws ``n_cues`` of them.
WORDS = (
    "amber", "azure", "coral", "ivory", "olive", "scarlet", "violet", "indigo", "crimson", "silver",
    "golden", "copper", "bronze", "maple", "cedar", "willow", "birch", "aspen", "pine", "oak",
    "falcon", "heron", "otter", "badger", "lynx", "raven", "sparrow", "beaver", "marten", "walrus",
    "garnet", "topaz", "jade", "onyx", "opal", "pearl", "quartz", "ruby", "basil", "clove",
    "ginger", "saffron", "thyme", "fennel", "anchor", "lantern", "compass", "harbor", "meadow", "canyon",
    "glacier", "lagoon", "tundra", "prairie", "summit", "valley", "thunder", "breeze", "frost", "ember",
    "comet", "nebula", "eclipse", "aurora",
)
#: exits of a junction: the first ``n_exits`` of these, listed in this order.
EXITS = ("north", "east", "west", "south", "up", "down")
#: onward moves of corridor rooms, by the letter the task id uses.
CORRIDOR = {"n": "north", "e": "east", "w": "west", "s": "south"}
NO_OPS = ("look", "wait")
SPLITS = ("train", "eval", "all")
#: at most this many mazes per split (fewer when the space of distinct mazes is smaller, e.g. k = 1).
SPLIT_SIZE = {"train": 4096, "eval": 512}
#: a maze is in eval when the SHA-256 of its task id is 0 modulo this, else in train.
EVAL_MODULUS = 4
_TABLE_TAG, _STREAM_TAG = 0x4A554E43, 0x4D415A45  # seeds of the cue tables and of the maze stream
_ENUMERATE_MAX = 50_000  # spaces up to this many mazes are enumerated, larger ones sampled
_SEGMENT = re.compile(r"^([news]{1,2})(\d+)$")
_HEAD = re.compile(r"^k(\d+)x(\d+)c(\d+)(?:h(\d+))?$")


@lru_cache(maxsize=None)
def cue_table(junction: int, n_cues: int, n_exits: int) -> tuple[tuple[str, int], ...]:
    """Junction ``junction``'s fixed cue table (the same in every maze and at every k):
    ``n_cues`` pairs ``(cue word, index of its right exit in EXITS[:n_exits])``, each exit the
    answer of ``n_cues // n_exits`` or one more cues (balanced). Seeded by the junction index, so
    the words of two junctions overlap and map differently.

    Raises:
        ValueError: ``junction < 1``, ``n_exits`` outside 2..len(EXITS), ``n_cues`` outside
            ``n_exits..len(WORDS)``.
    """
    check_sizes(n_cues, n_exits)
    if junction < 1:
        raise ValueError(f"junctions are numbered from 1, got {junction}")
    rng = np.random.default_rng([_TABLE_TAG, junction, n_cues, n_exits])
    words = rng.choice(len(WORDS), size=n_cues, replace=False)
    exits = rng.permutation(np.arange(n_cues) % n_exits)
    return tuple((WORDS[int(w)], int(e)) for w, e in zip(words, exits))


@lru_cache(maxsize=None)
def hinted_cues(junction: int, n_cues: int, n_exits: int, n_hinted: int) -> frozenset[int]:
    """Indices into junction ``junction``'s ``cue_table`` of its ``n_hinted`` *hinted* cues, whose
    sign comes with a voice saying the right exit (``A voice says: go east.``): taken round-robin
    over the exits in table order, so every exit is the answer of ``n_hinted // n_exits`` or one
    more of them. The rest are bare words the policy must learn. Raises ValueError as
    ``check_sizes``."""
    check_sizes(n_cues, n_exits, n_hinted)
    by_exit = [[i for i, (_, e) in enumerate(cue_table(junction, n_cues, n_exits)) if e == x] for x in range(n_exits)]
    order = [i for rank in range(n_cues) for col in by_exit if rank < len(col) for i in [col[rank]]]
    return frozenset(order[:n_hinted])


def check_sizes(n_cues: int, n_exits: int, n_hinted: int = 0) -> None:
    """Raises ValueError unless ``2 <= n_exits <= len(EXITS)``, ``n_exits <= n_cues <= len(WORDS)``
    and ``0 <= n_hinted <= n_cues``."""
    if not 2 <= n_exits <= len(EXITS):
        raise ValueError(f"n_exits must be in 2..{len(EXITS)}, got {n_exits}")
    if not n_exits <= n_cues <= len(WORDS):
        raise ValueError(f"n_cues must be in {n_exits}..{len(WORDS)} (n_exits..number of cue words), got {n_cues}")
    if not 0 <= n_hinted <= n_cues:
        raise ValueError(f"n_hinted must be in 0..n_cues = {n_cues}, got {n_hinted}")


@dataclass(frozen=True)
class Maze:
    """One maze: ``corridors[j-1]`` are the onward-move letters (``CORRIDOR``) of the 1 or 2 rooms
    before junction ``j``; ``cues[j-1]`` the index of junction ``j``'s cue in its ``cue_table``;
    ``n_hinted`` how many cues of each table are hinted (``hinted_cues``)."""

    k: int
    n_exits: int
    n_cues: int
    corridors: tuple[str, ...]
    cues: tuple[int, ...]
    n_hinted: int = 0

    @property
    def task_id(self) -> str:
        """e.g. ``k2x2c24h20-ne7-w13``: sizes (``h``: hinted cues per table, left out when 0), then
        per junction its corridor letters and cue index."""
        hint = f"h{self.n_hinted}" if self.n_hinted else ""
        return f"k{self.k}x{self.n_exits}c{self.n_cues}{hint}-" + "-".join(
            f"{c}{q}" for c, q in zip(self.corridors, self.cues))

    @classmethod
    def parse(cls, task_id: str) -> "Maze":
        """Inverse of ``task_id``. Raises ValueError on a malformed or impossible id."""
        head, *segs = str(task_id).split("-")
        m = _HEAD.match(head)
        parsed = [_SEGMENT.match(s) for s in segs]
        if not m or not segs or not all(parsed):
            raise ValueError(f"bad junction-maze task_id {task_id!r}; expected e.g. 'k2x2c24h20-ne7-w13'")
        k, n_exits, n_cues = map(int, m.groups()[:3])
        n_hinted = int(m.group(4) or 0)
        check_sizes(n_cues, n_exits, n_hinted)
        cues = tuple(int(p.group(2)) for p in parsed)
        if len(segs) != k or any(q >= n_cues for q in cues):
            raise ValueError(f"impossible junction-maze task_id {task_id!r}: need {k} segments, cues < {n_cues}")
        return cls(k, n_exits, n_cues, tuple(p.group(1) for p in parsed), cues, n_hinted)

    def cue(self, j: int) -> str:
        """The cue word on junction ``j``'s sign (1-based)."""
        return cue_table(j, self.n_cues, self.n_exits)[self.cues[j - 1]][0]

    def hinted(self, j: int) -> bool:
        """Whether junction ``j``'s cue is hinted (a voice says the right exit)."""
        return self.cues[j - 1] in hinted_cues(j, self.n_cues, self.n_exits, self.n_hinted)

    def right_exit(self, j: int) -> str:
        """The direction of junction ``j``'s onward exit (1-based)."""
        return EXITS[cue_table(j, self.n_cues, self.n_exits)[self.cues[j - 1]][1]]

    def walkthrough(self) -> list[str]:
        """The winning actions: every corridor move and every right exit (2k..3k actions)."""
        out = []
        for j, corridor in enumerate(self.corridors, 1):
            out += [f"go {CORRIDOR[c]}" for c in corridor] + [f"go {self.right_exit(j)}"]
        return out

    def ref(self) -> TaskRef:
        """Task id and content digest (layout, cue words and right exits, texts' version)."""
        return TaskRef(self.task_id, content_digest({
            "env": "JunctionMaze-v0", "k": self.k, "exits": list(EXITS[: self.n_exits]),
            "junctions": [{"corridor": [CORRIDOR[c] for c in corr], "cue": self.cue(j), "exit": self.right_exit(j),
                           **({"hinted": True} if self.hinted(j) else {})}
                          for j, corr in enumerate(self.corridors, 1)]}))

    def graph(self, horizon: int) -> TaskGraph:
        """The maze's ``TaskGraph`` (validated). State ids: ``r{j}.{i}`` corridor room ``i`` before
        junction ``j`` (``r1.1`` is the start), ``j{j}`` junction ``j``, ``dead{j}.{exit}``, ``goal``."""
        k, acts, nxt, rew, obs, kind = self.k, {}, {}, {}, {}, {}
        plural = "s" if k > 1 else ""

        def room(sid: str, text: str, label: str, moves: dict[str, str], after: str = "") -> None:
            obs[sid], kind[sid] = text + f" Exits: {', '.join(moves)}." + after, label
            acts[sid] = tuple(f"go {d}" for d in moves) + NO_OPS
            for d, target in moves.items():
                nxt[(sid, f"go {d}")], rew[(sid, f"go {d}")] = target, 1.0 if target == "goal" else 0.0
            for a in NO_OPS:
                nxt[(sid, a)], rew[(sid, a)] = sid, 0.0

        for j, corridor in enumerate(self.corridors, 1):
            for i, c in enumerate(corridor, 1):
                onward = f"r{j}.{i + 1}" if i < len(corridor) else f"j{j}"
                if (j, i) == (1, 1):
                    room("r1.1", f"You are at the entrance of a maze with {k} junction{plural}.", "start",
                         {CORRIDOR[c]: onward})
                else:
                    room(f"r{j}.{i}", f"You are in a corridor, room {i} of {len(corridor)} before junction {j} "
                         f"of {k}.", "filler", {CORRIDOR[c]: onward})
            right = self.right_exit(j)
            moves = {d: (("goal" if j == k else f"r{j + 1}.1") if d == right else f"dead{j}.{d}")
                     for d in EXITS[: self.n_exits]}
            voice = f" A voice says: go {right}." if self.hinted(j) else ""
            room(f"j{j}", f"You are at junction {j} of {k}.", "junction", moves, f" A sign reads '{self.cue(j)}'.{voice}")
            for d in EXITS[: self.n_exits]:
                if d != right:
                    obs[f"dead{j}.{d}"] = (f"You take the {d} exit at junction {j} of {k} and fall into a pit. "
                                           "You lost.")
                    kind[f"dead{j}.{d}"] = "dead"
        obs["goal"] = f"You take the {self.right_exit(k)} exit at junction {k} of {k} and reach the treasure room. You won!"
        kind["goal"] = "goal"
        terminal = frozenset(s for s, lab in kind.items() if lab in ("goal", "dead"))
        return TaskGraph("r1.1", acts, nxt, rew, terminal, obs, kind, horizon).validate()


def _in_eval(task_id: str) -> bool:
    return int(hashlib.sha256(task_id.encode()).hexdigest()[:8], 16) % EVAL_MODULUS == 0


def _corridor_options() -> list[str]:
    letters = "".join(CORRIDOR)
    return list(letters) + [a + b for a in letters for b in letters]


@lru_cache(maxsize=32)
def split_mazes(k: int, n_cues: int, n_exits: int, split: str, n_hinted: int = 0) -> tuple[Maze, ...]:
    """The mazes of ``split`` in a fixed order (the same in every process).

    Mazes come from one seeded stream (all of them, shuffled, when the space of distinct
    mazes — ``(20 * n_cues) ** k`` — is small, e.g. 480 at k = 1; else random draws without
    repeats); a maze goes to ``eval`` when the SHA-256 of its task id is 0 modulo 4, else to
    ``train``, so the splits share no maze (``n_hinted`` changes the texts and ids, not the layouts); each keeps its first ``SPLIT_SIZE`` mazes. ``all`` is
    train then eval.

    Raises:
        ValueError: unknown split, ``k < 1`` or bad sizes (``check_sizes``).
    """
    if split not in SPLITS:
        raise ValueError(f"unknown junction-maze split {split!r}; choose one of {SPLITS}")
    if split == "all":
        return split_mazes(k, n_cues, n_exits, "train", n_hinted) + split_mazes(k, n_cues, n_exits, "eval", n_hinted)
    if k < 1:
        raise ValueError(f"k (junctions per maze) must be >= 1, got {k}")
    check_sizes(n_cues, n_exits, n_hinted)
    rng = np.random.default_rng([_STREAM_TAG, k, n_cues, n_exits])
    options = _corridor_options()
    want, out, seen = SPLIT_SIZE[split], [], set()
    if (len(options) * n_cues) ** k <= _ENUMERATE_MAX:
        segments = list(itertools.product(range(len(options)), range(n_cues)))
        everything = list(itertools.product(segments, repeat=k))
        candidates = (everything[int(i)] for i in rng.permutation(len(everything)))
    else:
        candidates = (tuple(zip(c, q)) for _ in itertools.count()
                      for c, q in zip(rng.integers(len(options), size=(4096, k)).tolist(),
                                      rng.integers(n_cues, size=(4096, k)).tolist()))
    for segs in candidates:
        maze = Maze(k, n_exits, n_cues, tuple(options[c] for c, _ in segs), tuple(q for _, q in segs), n_hinted)
        tid = maze.task_id
        if tid in seen:
            continue
        seen.add(tid)
        if _in_eval(tid) == (split == "eval"):
            out.append(maze)
            if len(out) == want:
                break
    return tuple(out)


@lru_cache(maxsize=32)
def split_refs(k: int, n_cues: int, n_exits: int, split: str, n_hinted: int = 0) -> tuple[TaskRef, ...]:
    """``TaskRef`` of every maze of ``split`` (``split_mazes`` order)."""
    return tuple(m.ref() for m in split_mazes(k, n_cues, n_exits, split, n_hinted))

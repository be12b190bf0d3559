"""The branch tree of a group's turns (tree rollouts: ``parent_turn_id`` across episodes).

Turns are nodes, ``parent_turn_id`` edges. Linear stretches are compressed: a ``Branch`` is a
chain of turns each with exactly one child, followed by the branches that fork at its last
turn. A group of independent rollouts is a forest of single chains (not "branched").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentrl.view.turns import GroupTurn


@dataclass(slots=True)
class Branch:
    """A chain of turns (parent → child, in order) and the branches forking after its last turn."""

    chain: list[GroupTurn]
    children: list["Branch"] = field(default_factory=list)

    @property
    def episodes(self) -> list[int]:
        """Episode ids of the chain's turns, each once, in order."""
        return list(dict.fromkeys(g.episode_id for g in self.chain))


def build_forest(turns: list[GroupTurn]) -> list[Branch]:
    """The compressed tree(s) of ``turns``; roots are turns whose parent is absent or unknown.

    Iterative (no recursion limit on long episodes); children ordered by (episode, t).
    """
    by_id = {g.turn_id: g for g in turns}
    kids: dict[int, list[GroupTurn]] = {}
    roots: list[GroupTurn] = []
    for g in turns:
        if g.parent_turn_id is None or g.parent_turn_id not in by_id or g.parent_turn_id == g.turn_id:
            roots.append(g)
        else:
            kids.setdefault(g.parent_turn_id, []).append(g)
    for v in kids.values():
        v.sort(key=lambda g: (g.episode_id, g.t))
    forest = [Branch([r]) for r in roots]
    stack = list(forest)
    seen: set[int] = set()
    while stack:
        br = stack.pop()
        node = br.chain[-1]
        while len(kids.get(node.turn_id, ())) == 1 and node.turn_id not in seen:
            seen.add(node.turn_id)
            node = kids[node.turn_id][0]
            br.chain.append(node)
        if node.turn_id in seen:  # a cycle in corrupt data: stop here
            continue
        seen.add(node.turn_id)
        br.children = [Branch([c]) for c in kids.get(node.turn_id, ())]
        stack.extend(br.children)
    return forest


def is_branched(turns: list[GroupTurn]) -> bool:
    """True when some turn has two or more children or a parent in another episode."""
    episode_of = {g.turn_id: g.episode_id for g in turns}
    n_kids: dict[int, int] = {}
    for g in turns:
        if g.parent_turn_id is None or g.parent_turn_id not in episode_of:
            continue
        if episode_of[g.parent_turn_id] != g.episode_id:
            return True
        n_kids[g.parent_turn_id] = n_kids.get(g.parent_turn_id, 0) + 1
        if n_kids[g.parent_turn_id] > 1:
            return True
    return False

"""``agentrl/JunctionMaze-v0``: K decisive junctions per episode, cue words decide the exits.

A benchmark for credit assignment (issue 38; docs/LEARNING.md, "Junction maze"): an episode
crosses ``k`` junctions (default 5; ``k = 1`` is the control with one decisive choice). Before
each junction lies a corridor of 1 or 2 filler rooms with one onward move (the first room of the
first corridor is the entrance). Junction ``j`` has ``n_exits`` exits (default 2: north, east)
and a sign with a cue word; junction ``j``'s own fixed cue table (``maze.cue_table``: seeded by
``j``, shared by every maze and every ``k``, ``n_cues`` words, default 24, each mapped to one
exit, balanced) says which exit goes on. ``n_hinted`` of each table's cues (default 20, balanced
over the exits, ``maze.hinted_cues``) are *hinted*: a voice names the right exit after the sign. A wrong exit ends the episode (terminated, reward 0,
won False); the right exit of the last junction enters the goal (terminated, reward 1.0, won
True). Each junction has the same prior difficulty at every ``k``. ``look`` and ``wait`` are
no-ops, admissible in every non-terminal room; they only spend turns. After ``max_turns`` turns
(the horizon, default 24; the walkthrough takes 2k..3k) the episode is truncated.

Observations are Markov: the text is a pure function of the state (no history), e.g.
``You are at junction 2 of 5. Exits: north, east. A sign reads 'amber'. A voice says: go east.``
(the voice only for a hinted cue); ``anchor_obs``
is that text; ``admissible_actions`` are the room's moves (``go north``, ...) then ``look``,
``wait``. Any other action is ``action_valid=False``, answered ``Nothing happens.`` followed by
the room's text, and spends a turn in place (the graph does not model it). Actions are matched
after whitespace normalisation (``metadata["agentrl.action_normalize"] = "whitespace"``).
Milestones (BEACON, ALGORITHMS.md §15.2): a step that leaves junction ``j`` by its right exit has
``info["milestone"] = True`` (the k junctions are the k milestones, in order; a wrong exit, a
no-op or an invalid action never is); ``info["n_milestones"] = k`` at reset and every step.

Paraphrase (``paraphrase=1``; default 0, where every text above is exactly as described): the task
graph is unchanged (``task_graph()`` keeps the canonical texts; ``step`` follows its states and
rewards), but every visit to a non-terminal room (reset, a move, a no-op, an invalid action) shows
a wording drawn anew from the room's bank of ``paraphrase_bank`` (B, default 16) distinct wordings
(``paraphrase.bank``: templates x sentence orders x distractor objects, a pure function of (task id,
state id, bank index); the cue word, the voice's ``go <exit>`` and every exit word stay readable).
``anchor_obs`` is the text shown, so no two visits need share an anchor; terminal rooms and
``Nothing happens.`` stay as at 0. Episodes of one group share the env seed, so the env declares
``metadata["agentrl.reset_member"]`` and the rollout passes ``options["agentrl.member"] = [j, G]``
(``agentrl.env.contract``): member ``j`` of ``G`` draws each visit's wording uniformly from its
slice ``{b : b % G == j}`` of the bank (the whole bank without the option) with an RNG seeded by
(reset seed, j), so two members of a group never show a room alike and a replay with the same seed
and options is exact. ``G > B`` is refused at reset. ``env.unwrapped.wordings(state)`` gives a
room's bank: a policy's exact π in a room is its probability averaged over the wordings it can be
shown there (``studies/llm_maze.py``; in a window prompt the task text is the reset's wording,
so π there also depends on that one wording).

Tasks: a maze is fully determined by its task id (``maze.Maze.task_id``, e.g.
``k2x2c24h20-ne7-w13``); ``reset(seed=s)`` draws a maze of the split from ``s``. ``train`` (up to
4096 mazes) and ``eval`` (up to 512) are disjoint sets of mazes (by the hash of the id; both
draw on the same cue tables, so what is learned on train transfers), ``all`` is their union
(``maze.split_mazes``). ``env.unwrapped.task_graph()`` gives the current maze's
``agentrl.env.TaskGraph``; ``step`` follows it exactly (same next states, rewards, texts; texts at
``paraphrase=0``), so exact values and advantages (``agentrl.credit.exact``) apply to episodes played here.

Difficulty (issue 38: "the untrained SmolLM2 policy succeeds 10-30 % at k = 5"): with 3 exits and
bare cue words the untrained SmolLM2-135M-Instruct (Markov prompt, constrained decoding,
``examples/grpo_junction.yaml``) wins 0.1 % at k = 5 (exact, under its own π, 6 mazes): it takes
the first listed exit ~75 % of the time whatever the sign says. Two levers keep each junction's
prior difficulty the same at every k and the cue tables learnable: ``n_exits`` and the share of
hinted cues ``n_hinted / n_cues``, which the untrained model follows more often than not (probe
at junction 1, sign after the exit list, renormalised over the exits: hinted ~0.70, bare ~0.51
with 2 exits; a voice or a sign reading ``go east`` before the exit list were followed less).
The defaults (2 exits, 20 of 24 cues hinted) measured, same settings, fp32, temperature 1:
k = 1: 42/64 episodes won (65.6 %; exact success under the model's own π 70.7 %); k = 5: 4/64 (6.2 %; exact 9.9 %), 2 seeds x 4 mazes x 8 episodes each (studies/results/credit_fidelity_llm.json). That is just under the 10-30 % target; raising ``n_hinted`` toward ``n_cues`` raises it (unmeasured).
"""

from __future__ import annotations

import gymnasium
import numpy as np

from agentrl.env import (ACTION_WHITESPACE, INFO_ADMISSIBLE, INFO_ANCHOR, INFO_MILESTONE, INFO_N_MILESTONES,
                         INFO_TASK, INFO_VALID, INFO_WALKTHROUGH, INFO_WON, META_RESET_MEMBER, OPTION_MEMBER,
                         TaskGraph, normalize_action, text_spaces)
from agentrl.env.tasks import TaskRef, check_split_disjoint

from agentrl_envs.junction import paraphrase as para
from agentrl_envs.junction.maze import SPLITS, Maze, check_sizes, split_mazes, split_refs

NOTHING = "Nothing happens."
#: default sizes: tuned so the untrained SmolLM2 wins 10-30 % at k = 5 (module docstring).
N_EXITS, N_CUES, N_HINTED = 2, 24, 20
OVER = "The episode is over; call reset()."
#: default ``paraphrase_bank``: wordings per room at ``paraphrase=1`` (>= the group size).
PARAPHRASE_BANK = 16
_VISIT_TAG = 0x56495354  # seeds the per-episode wording draws ("VIST")


class JunctionMazeEnv(gymnasium.Env):
    """The junction maze (see module docstring).

    Args:
        k: junctions per episode (>= 1; default 5).
        split: ``"train"``, ``"eval"`` (disjoint from train) or ``"all"``.
        max_turns: the horizon: turns after which the episode is truncated (>= 3k; default 24).
        n_cues: cue words per junction (``n_exits``..64; default 24).
        n_exits: exits per junction (2..6; default 2).
        n_hinted: hinted cues per junction table (0..n_cues; default 20; ``maze.hinted_cues``).
        paraphrase: 0 (default: one fixed text per room) or 1 (every visit worded anew from the
            room's bank; module docstring).
        paraphrase_bank: wordings per room at ``paraphrase=1`` (1..``paraphrase.MAX_BANK``; default
            16); must be >= the group size G of ``options["agentrl.member"]`` at reset.
    Raises:
        ValueError: a bad size (``n_hinted > n_cues``, ...), an unknown split, or ``max_turns < 3 * k`` (the longest
            walkthrough would not fit), ``paraphrase`` not 0/1, a bank size outside 1..MAX_BANK.
    """

    metadata = {"render_modes": [], "agentrl.check_kwargs": {}, "agentrl.action_normalize": ACTION_WHITESPACE,
                "agentrl.splits": SPLITS, META_RESET_MEMBER: True}

    @classmethod
    def list_tasks(cls, split: str = "train", k: int = 5, n_cues: int = N_CUES, n_exits: int = N_EXITS,
                   n_hinted: int = N_HINTED, **_: object) -> list[TaskRef]:
        """Task-list hook (``agentrl.env.tasks``): every maze of ``split``. Raises ValueError as
        ``maze.split_mazes``."""
        return list(split_refs(int(k), int(n_cues), int(n_exits), split, int(n_hinted)))

    def __init__(self, k: int = 5, split: str = "train", max_turns: int = 24, n_cues: int = N_CUES,
                 n_exits: int = N_EXITS, n_hinted: int = N_HINTED, paraphrase: int = 0,
                 paraphrase_bank: int = PARAPHRASE_BANK) -> None:
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"k (junctions per episode) must be an int >= 1, got {k!r}")
        check_sizes(n_cues, n_exits, n_hinted)
        if split not in SPLITS:
            raise ValueError(f"unknown junction-maze split {split!r}; choose one of {SPLITS}")
        if not isinstance(max_turns, int) or max_turns < 3 * k:
            raise ValueError(f"max_turns must be an int >= 3 * k = {3 * k} (the longest walkthrough), "
                             f"got {max_turns!r}")
        self.k, self.split, self.max_turns, self.n_cues, self.n_exits = k, split, max_turns, n_cues, n_exits
        if paraphrase not in (0, 1) or isinstance(paraphrase, float):
            raise ValueError(f"paraphrase must be 0 (fixed room texts) or 1 (a fresh wording per visit), "
                             f"got {paraphrase!r}")
        if isinstance(paraphrase_bank, bool) or not isinstance(paraphrase_bank, int) \
                or not 1 <= paraphrase_bank <= para.MAX_BANK:
            raise ValueError(f"paraphrase_bank must be an int in 1..{para.MAX_BANK}, got {paraphrase_bank!r}")
        self.n_hinted, self.paraphrase, self.paraphrase_bank = n_hinted, int(paraphrase), paraphrase_bank
        check_split_disjoint(type(self), split, {"k": k, "n_cues": n_cues, "n_exits": n_exits, "n_hinted": n_hinted},
                             SPLITS)
        self._mazes = split_mazes(k, n_cues, n_exits, split, n_hinted)
        self._ids = {m.task_id for m in self._mazes}
        self.observation_space, self.action_space = text_spaces()
        self.maze: Maze | None = None
        self._graph: TaskGraph | None = None
        self.member: tuple[int, int] = (0, 1)  # (j, G) of the last reset
        self._visits: np.random.Generator | None = None  # the wording draws (paraphrase=1)
        self._shown = ""  # the room text of the last answer (the anchor)

    def _maze(self, task_id: str) -> Maze:
        """The maze ``task_id`` of this env's split and sizes. Raises ValueError for a malformed
        id, other sizes, or a maze of another split (a train env never plays an eval maze)."""
        maze = Maze.parse(task_id)
        if maze.task_id not in self._ids:
            raise ValueError(f"junction maze {task_id!r} is not in split {self.split!r} with k={self.k}, "
                             f"n_exits={self.n_exits}, n_cues={self.n_cues}, n_hinted={self.n_hinted} ({len(self._mazes)} mazes, e.g. "
                             f"{self._mazes[0].task_id!r})")
        return maze

    def _start(self, maze: Maze) -> None:
        self.maze, self._graph = maze, maze.graph(self.max_turns)
        self.state, self.turns, self.done, self._won = self._graph.start, 0, False, False

    def wordings(self, state_id: str) -> tuple[str, ...]:
        """The wordings room ``state_id`` of the current maze can be shown with: its bank (bank order,
        ``paraphrase_bank`` texts) at ``paraphrase=1``; ``(task_graph().observation[state_id],)`` at 0
        and for terminal rooms (always shown canonically). A policy's exact π at ``paraphrase=1`` is
        the mean of its π over a room's wordings (member j of G: over the slice ``b % G == j``).

        Raises:
            RuntimeError: before reset. KeyError: an unknown state id.
        """
        g = self.task_graph()
        if state_id not in g.observation:
            raise KeyError(f"{state_id!r} is not a state of maze {self.maze.task_id!r}; "
                           f"states: {sorted(g.observation)}")
        if not self.paraphrase or state_id in g.terminal:
            return (g.observation[state_id],)
        return para.bank(self.maze.task_id, state_id, self.paraphrase_bank)

    def _member(self, value: object) -> tuple[int, int]:
        """(j, G) from ``options["agentrl.member"]`` (None: (0, 1)). Raises ValueError for a
        malformed value or ``G > paraphrase_bank`` (members would share wordings)."""
        if value is None:
            return 0, 1
        try:
            j, g = (int(x) for x in value)  # type: ignore[union-attr]
        except (TypeError, ValueError):
            raise ValueError(f"options[{OPTION_MEMBER!r}] must be [j, G] (member j of a group of G), "
                             f"got {value!r}") from None
        if not 0 <= j < g:
            raise ValueError(f"options[{OPTION_MEMBER!r}] = {value!r}: need 0 <= j < G")
        if g > self.paraphrase_bank:
            raise ValueError(f"the group size G={g} exceeds paraphrase_bank={self.paraphrase_bank}: some member would "
                             f"draw no wording of its own; make the env with paraphrase_bank >= {g} "
                             f"(e.g. env.kwargs.paraphrase_bank={g}) or use groups of "
                             f"<= {self.paraphrase_bank} episodes")
        return j, g

    def _room(self, state: str) -> str:
        """The text of ``state`` for this visit: canonical at ``paraphrase=0`` and for terminal rooms,
        else a wording drawn from this member's slice of the room's bank."""
        g = self._graph
        if self.paraphrase and state not in g.terminal:
            j, n = self.member
            self._shown = self.wordings(state)[para.draw(self.paraphrase_bank, j, n, self._visits)]
        else:
            self._shown = g.observation[state]
        return self._shown

    def task_graph(self) -> TaskGraph:
        """The current maze's ``TaskGraph`` (horizon = ``max_turns``). Raises RuntimeError before reset."""
        if self._graph is None:
            raise RuntimeError("JunctionMazeEnv.task_graph called before reset()")
        return self._graph

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = options or {}
        tid = options.get(INFO_TASK)
        if self.paraphrase:
            self.member = self._member(options.get(OPTION_MEMBER))  # raises before any state changes
        self._start(self._maze(str(tid)) if tid else self._mazes[int(self.np_random.integers(len(self._mazes)))])
        if self.paraphrase:  # the visits' draws: a function of (seed, member) only
            base = int(seed) if seed is not None else int(self.np_random.integers(1 << 63))
            self._visits = np.random.default_rng([_VISIT_TAG, base, self.member[0]])
        obs = self._room(self.state)
        return obs, {INFO_ANCHOR: obs, INFO_ADMISSIBLE: list(self._graph.actions[self.state]), INFO_WON: False,
                     INFO_TASK: self.maze.task_id, INFO_WALKTHROUGH: self.maze.walkthrough(),
                     INFO_N_MILESTONES: self.k}

    def step(self, action: str):
        if self._graph is None:
            raise RuntimeError("JunctionMazeEnv.step called before reset()")
        g = self._graph
        if self.done:
            room = self._shown
            return OVER, 0.0, self.state in g.terminal, self.state not in g.terminal, {
                INFO_ANCHOR: room, INFO_ADMISSIBLE: [], INFO_WON: self._won, INFO_VALID: False,
                INFO_MILESTONE: False, INFO_N_MILESTONES: self.k}
        act = normalize_action(action, ACTION_WHITESPACE) if isinstance(action, str) else ""
        valid = act in g.actions[self.state]
        reward, before = 0.0, self.state
        if valid:
            reward = float(g.reward[(self.state, act)])
            self.state = g.next_state[(self.state, act)]
        self.turns += 1
        room = self._room(self.state)
        terminated = self.state in g.terminal
        truncated = not terminated and self.turns >= self.max_turns
        self._won = terminated and g.kind[self.state] == "goal"
        self.done = terminated or truncated
        info = {INFO_ANCHOR: room, INFO_ADMISSIBLE: [] if self.done else list(g.actions[self.state]),
                INFO_WON: self._won, INFO_VALID: valid,
                # BEACON (§15.2): leaving a junction by its right exit (into the next corridor or the goal)
                INFO_MILESTONE: g.kind[before] == "junction" and self.state != before and g.kind[self.state] != "dead",
                INFO_N_MILESTONES: self.k}
        return (room if valid else f"{NOTHING} {room}"), reward, terminated, truncated, info

    def snapshot(self) -> dict:
        """The full game state as a small JSON-able dict (``agentrl.rollout.branching``);
        ``restore`` puts it back. Raises RuntimeError before reset."""
        if self.maze is None:
            raise RuntimeError("JunctionMazeEnv.snapshot called before reset()")
        snap = {"task": self.maze.task_id, "state": self.state, "turns": self.turns, "done": self.done,
                "won": self._won}
        if self.paraphrase:  # where the wording draws stand, and the text shown last
            snap.update(member=list(self.member), visits=self._visits.bit_generator.state, shown=self._shown)
        return snap

    def restore(self, snapshot: dict) -> None:
        """Restore a ``snapshot()`` state (the maze draws randomness only at reset; at ``paraphrase=1``
        the snapshot carries the wording draws' state). Raises ValueError for a maze outside this
        env's split, or a snapshot of another ``paraphrase`` setting."""
        if ("visits" in snapshot) != bool(self.paraphrase):
            raise ValueError(f"a snapshot {'with' if 'visits' in snapshot else 'without'} wording draws cannot be "
                             f"restored at paraphrase={self.paraphrase}")
        self._start(self._maze(str(snapshot["task"])))
        self.state, self.turns = str(snapshot["state"]), int(snapshot["turns"])
        self.done, self._won = bool(snapshot["done"]), bool(snapshot["won"])
        self._shown = self._graph.observation[self.state]
        if self.paraphrase:
            self.member = self._member(snapshot["member"])
            self._visits = np.random.default_rng()
            self._visits.bit_generator.state = snapshot["visits"]
            self._shown = str(snapshot["shown"])

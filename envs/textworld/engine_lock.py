"""One lock for every call into TextWorld's engines in a process (``ENGINE_LOCK``).

TextWorld parses a game's logic and its text grammars (and ALFWorld's PDDL games, through
``textworld.envs.pddl``) with module-global tatsu parsers, some lazily during a step, and ALFWorld's
PDDL engine grounds a game at reset with fast-downward's translator, which keeps module-global state
too; none of it is thread-safe. Envs driven from several threads of one process — a harness's
verifier replays (``agentrl.rollout.harness``), threaded env users — failed inside them with
IndexError / TypeError / FailedToken / KeyError: 10 of 16 episodes of the first held-out evaluation
of ``examples/harness_textworld.yaml``; 2–8 of 8 ALFWorld resets and steps in a fresh process.
``TextWorldEnv`` and ``ALFWorldEnv`` hold this lock around every load, reset, step and planner call
(an ``RLock``: reset loads inside it). Env workers are processes (``agentrl.env.EnvPool``), so a
rollout never waits on it; threads of one process take turns.
"""

from __future__ import annotations

import threading

#: held around every call into a TextWorld or ALFWorld engine (load, reset, step, planner)
ENGINE_LOCK = threading.RLock()

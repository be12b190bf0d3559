"""One lock for loading TextWorld games in a process (``PARSE_LOCK``).

TextWorld parses a game's logic (and ALFWorld's PDDL games, through ``textworld.envs.pddl``) with
module-global tatsu parsers, and ALFWorld's PDDL engine grounds a game at reset with fast-downward's
translator, which keeps module-global state too; neither is thread-safe: games loaded at once from
several threads of one process — a harness's verifier replays (``agentrl.rollout.harness``), threaded
env users — failed inside them with IndexError / TypeError / FailedToken / KeyError (10 of 16
episodes of the first held-out evaluation of ``examples/harness_textworld.yaml``; 7–8 of 8 ALFWorld
resets in a fresh process). ``TextWorldEnv`` loads games and ``ALFWorldEnv`` loads and resets them
under this lock; env steps run unlocked.
"""

from __future__ import annotations

import threading

#: held while a TextWorld game is loaded (``textworld.start``) and an ALFWorld one loaded and reset
PARSE_LOCK = threading.Lock()

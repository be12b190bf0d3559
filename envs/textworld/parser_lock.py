"""One lock for loading TextWorld games in a process (``PARSE_LOCK``).

TextWorld parses a game's logic (and ALFWorld's PDDL games, through ``textworld.envs.pddl``) with
module-global tatsu parsers, which are not thread-safe: games loaded at once from several threads
of one process — a harness's verifier replays (``agentrl.rollout.harness``), threaded env users —
failed inside the parser with IndexError / TypeError / FailedToken (10 of 16 episodes of the first
held-out evaluation of ``examples/harness_textworld.yaml``; 7–8 of 8 ALFWorld resets in a fresh
process). ``TextWorldEnv`` and ``ALFWorldEnv`` load games under this lock; the parsed logic is then
cached by TextWorld, and env steps run unlocked.
"""

from __future__ import annotations

import threading

#: held while a TextWorld or ALFWorld game is loaded (``textworld.start``, ``PddlEnv.load``)
PARSE_LOCK = threading.Lock()

"""TextWorld envs: games generated offline with ``tw-make`` and cached (``games.py``), played
through TextWorld's API in the TextEnv contract (``env.py``). Needs the ``textworld`` extra."""

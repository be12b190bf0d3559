"""SIGTERM landing where Python drops exceptions (a CI failure, 2026-12-07): ``agentrl train``'s
handler raised ``Terminated`` inside an import lock's weakref callback, Python printed "Exception
ignored in: <function _get_module_lock.<locals>.cb>" and the run trained on to its end and exited 0.
``sigterm_abandons_the_iteration`` now raises it again where the process has gone on to."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import signal, sys, time
    from agentrl.cli.train import Terminated, sigterm_abandons_the_iteration

    class Bomb:
        def __del__(self):  # the signal's handler runs here, where Python drops what it raises
            signal.raise_signal(signal.SIGTERM)
            for _ in range(3):
                pass
            print("del finished", flush=True)

    hooks = sys.unraisablehook
    with sigterm_abandons_the_iteration():
        try:
            Bomb()
            print("after del", flush=True)
            for _ in range(300):
                time.sleep(0.01)
            print("not terminated", flush=True)
        except Terminated as exc:
            print("terminated:", exc, flush=True)
    assert sys.unraisablehook is hooks and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    print("restored", flush=True)
""")


def test_a_terminated_dropped_inside_del_is_raised_again_after_it():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["after del", "terminated: signal 15", "restored"], done.stdout + done.stderr
    assert "Exception ignored" not in done.stderr  # the drop is handled, not reported


def test_other_unraisable_exceptions_still_reach_the_previous_hook():
    script = textwrap.dedent("""
        from agentrl.cli.train import sigterm_abandons_the_iteration

        class Broken:
            def __del__(self):
                raise ValueError("from __del__")

        with sigterm_abandons_the_iteration():
            Broken()
        print("ok", flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    assert "Exception ignored" in done.stderr and "ValueError: from __del__" in done.stderr

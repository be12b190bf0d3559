"""The trusted HumanEval check program that runs *inside* the sandbox (stdlib only; the
grader ships this file's text as the sandbox's ``main.py``; never imported by agentrl).

Two processes. The **checker** (this process) runs the task's own code: the prompt's
helpers and ``check(candidate)`` from the tests. The **solution** (a child forked before any
secret is read) runs the agent's code and answers calls. ``candidate(*args)`` sends the
arguments to the child and gets the return value back through ``marshal``, which carries
only exact built-in types (int, float, str, list, dict, …): an object with its own
``__eq__`` cannot cross, and the comparison in the test is always the built-in one. After
``check`` returns, the checker prints ``MARKER nonce`` and exits 0; the grader accepts a
run only with that line and exit status 0.

The nonce, the entry point and the test source are in ``check.spec``, read and unlinked
before the child may run any agent code; the checker is non-dumpable (``PR_SET_DUMPABLE``
0), so the child, although it has the same uid, cannot read its memory or file
descriptors through ``/proc``. The child can kill or stop the checker (a failure or a
timeout, never a pass).

Exit: 0 after the last test passed (verdict line printed); 1 when a test failed or the
solution failed to load, raised, returned something ``marshal`` refuses, or exited; the
solution's fatal signal (e.g. SIGXCPU) when it was killed, so timeouts read as before.
"""

import builtins
import marshal
import os
import struct
import sys

MARKER = "AGENTRL-CHECK-PASSED"
SPEC_FILE = "check.spec"  # nonce line, entry point line, then the test source
_TESTS = {}  # file name -> source, for tracebacks (the file itself is gone)
SOLUTION_FILE = "solution.py"
MAX_MESSAGE = 64 << 20

# nothing may be imported from the work dir, which the solution can write to
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if p not in ("", ".", _here)]


class SolutionError(Exception):
    """The solution's process failed in a way that is not a Python exception of a call."""


def _send(fd, obj):
    data = marshal.dumps(obj)
    data = struct.pack(">I", len(data)) + data
    while data:
        data = data[os.write(fd, data):]


def _recv(fd):
    head = _read_exact(fd, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">I", head)
    if size > MAX_MESSAGE:
        raise SolutionError(f"the solution sent a message of {size} bytes (limit {MAX_MESSAGE})")
    body = _read_exact(fd, size)
    if body is None:
        return None
    return marshal.loads(body)


def _read_exact(fd, n):
    parts, left = [], n
    while left:
        chunk = os.read(fd, left)
        if not chunk:
            return None
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _plain(value):
    """Raise TypeError unless ``value`` is data built of exact built-in types only."""
    t = type(value)
    if t in (int, float, complex, str, bytes, bool) or value is None:
        return
    if t in (list, tuple, set, frozenset):
        for item in value:
            _plain(item)
        return
    if t is dict:
        for k, v in value.items():
            _plain(k)
            _plain(v)
        return
    raise TypeError(f"returned an object of type {t.__module__}.{t.__qualname__}; "
                    "return plain Python data (int, float, str, bool, None, list, tuple, dict, set)")


def _child(requests, replies, go):
    """The solution's process: wait for the entry point's name, load the solution, serve calls."""
    os.close(0)
    entry_point = _recv(go)
    if not isinstance(entry_point, str):
        os._exit(3)
    os.close(go)
    ns = {"__name__": "__main__", "__builtins__": builtins}
    try:
        with open(SOLUTION_FILE) as fh:
            source = fh.read()
        exec(compile(source, SOLUTION_FILE, "exec"), ns)
        fn = ns[entry_point]
    except Exception as exc:  # noqa: BLE001 - reported to the checker
        _report(exc)
        _send(replies, ("load-failed", type(exc).__name__, _args(exc)))
        os._exit(0)
    _send(replies, ("ready",))
    while True:
        msg = _recv(requests)
        if msg is None:
            os._exit(0)
        args, kwargs = msg
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - a call's exception goes back to the test
            _report(exc)
            reply = ("raised", type(exc).__name__, _args(exc))
        else:
            try:
                _plain(result)
                reply = ("ok", result)
            except TypeError as exc:
                reply = ("raised", "TypeError", (str(exc),))
        sys.stdout.flush()
        _send(replies, reply)


class Solution:
    """The checker's handle on the solution's process."""

    def __init__(self, pid, requests, replies):
        self.pid, self.requests, self.replies = pid, requests, replies

    def _reply(self, during):
        try:
            msg = _recv(self.replies)
        except (ValueError, EOFError, TypeError) as exc:
            raise SolutionError(f"the solution sent an unreadable reply {during}: {exc}") from None
        if msg is None:
            self._died(during)
        return msg

    def _died(self, during):
        _, status = os.waitpid(self.pid, 0)
        if os.WIFSIGNALED(status):
            import signal

            sys.stdout.flush()
            sys.stderr.flush()
            signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
            os.kill(os.getpid(), os.WTERMSIG(status))  # die the same way: timeouts read as timeouts
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
        raise SolutionError(f"the solution's process exited with code {code} {during}; "
                            "sys.exit/os._exit end the solution before the tests finish")

    def wait_ready(self):
        msg = self._reply("while loading")
        if msg[0] == "load-failed":
            raise SolutionError(f"the solution failed to load ({msg[1]}, see above)")

    def __call__(self, *args, **kwargs):
        _send(self.requests, (args, kwargs))
        msg = self._reply("during a call")
        if msg[0] == "ok":
            _plain(msg[1])
            return msg[1]
        raise _builtin_error(msg[1], msg[2])

    def stop(self):
        try:
            os.kill(self.pid, 9)  # SIGKILL (the signal module costs 10 ms to import)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):  # already reaped by _died
            pass


def _args(exc):
    """``exc.args`` when it is plain data (it crosses through marshal), else ``(str(exc),)``."""
    try:
        _plain(exc.args)
        return exc.args
    except TypeError:
        return (str(exc),)


def _builtin_error(name, args):
    """The built-in exception class called ``name`` (else ``SolutionError``) with ``args``."""
    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception) and type(args) is tuple:
        try:
            return cls(*args)
        except Exception:  # noqa: BLE001 - an exception class with other arguments
            pass
    return SolutionError(f"{name}: {args}")


def _non_dumpable():
    import ctypes

    pr_set_dumpable = 4
    if ctypes.CDLL(None, use_errno=True).prctl(pr_set_dumpable, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def main():
    _non_dumpable()
    requests_r, requests_w = os.pipe()
    replies_r, replies_w = os.pipe()
    go_r, go_w = os.pipe()
    sys.stdout.flush()
    pid = os.fork()  # before check.spec is read: the child's memory never held the nonce
    if pid == 0:
        for fd in (requests_w, replies_r, go_w):
            os.close(fd)
        _child(requests_r, replies_w, go_r)
        os._exit(0)
    for fd in (requests_r, replies_w, go_r):
        os.close(fd)
    with open(SPEC_FILE, encoding="utf-8") as fh:
        nonce, entry_point, test_source = fh.read().split("\n", 2)
    os.unlink(SPEC_FILE)
    _TESTS["check.py"] = test_source
    ns = {"__name__": "__check__", "__builtins__": builtins}
    exec(compile(test_source, "check.py", "exec"), ns)
    _send(go_w, entry_point)  # only now may the solution run
    os.close(go_w)
    solution = Solution(pid, requests_w, replies_r)
    ns[entry_point] = solution  # as upstream: tests that name the function call the solution
    try:
        solution.wait_ready()
        ns["check"](solution)
    finally:
        solution.stop()
    sys.stdout.flush()
    sys.stdout.write(f"\n{MARKER} {nonce}\n")
    sys.stdout.flush()


def _report(exc):
    """Print ``exc``'s traceback without the harness's own frames (noise to the agent).
    Python-level printing, so the lines of the (unlinked) tests show."""
    import linecache
    import traceback

    for name, source in _TESTS.items():
        linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    here = os.path.abspath(__file__)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename != here]
    head = ["Traceback (most recent call last):\n", *traceback.format_list(frames)] if frames else []
    sys.stderr.write("".join(head + traceback.format_exception_only(type(exc), exc)))
    sys.stderr.flush()


if __name__ == "__main__":
    try:
        main()
    except Exception as error:  # noqa: BLE001 - a failed test is a traceback and exit 1
        _report(error)
        sys.exit(1)

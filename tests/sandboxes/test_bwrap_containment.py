"""Containment of hostile payloads by the default (bwrap) backend — ENVIRONMENTS.md §4.2.

Each test asserts the specific outcome (signal, errno, exception name) and that no process
of the sandbox uids survives the run. Network probes only ever target 127.0.0.1 and this
host's own addresses.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time

import pytest

from agentrl_sandboxes import Limits
from agentrl_sandboxes.bwrap import uid_pids

BASE_UID = 1_300_000


@pytest.fixture(scope="module")
def sb():
    from agentrl_sandboxes import SandboxUnavailableError
    from agentrl_sandboxes.bwrap import BwrapSandbox

    try:
        box = BwrapSandbox(slots=2, base_uid=BASE_UID, limits=Limits(timeout_s=10, max_procs=32))
    except SandboxUnavailableError as exc:
        pytest.skip(f"bwrap backend unavailable here: {exc}")
    yield box
    box.close()


def leftovers() -> list[int]:
    """Pids of any process still owned by one of the sandbox slot uids."""
    return [p for uid in range(BASE_UID, BASE_UID + 64) for p in uid_pids(uid)]


def test_runs_as_unprivileged_uid_in_private_workdir(sb):
    r = sb.run(code="import os; print(os.getuid(), os.getcwd(), sorted(os.listdir('/')))")
    uid, cwd, root = r.stdout.split(" ", 2)
    assert r.ok and r.backend == "bwrap"
    assert BASE_UID <= int(uid) < BASE_UID + 64
    assert cwd == "/sandbox"
    assert "root" not in root and "work" not in root and "home" not in root


def test_cpu_bound_infinite_loop_gets_sigxcpu(sb):
    r = sb.run(code="while True: pass", limits=Limits(timeout_s=30, cpu_s=1))
    assert r.timed_out and r.signal == signal.SIGXCPU and r.exit_code == 128 + signal.SIGXCPU
    assert 0.9 < r.duration_s < 29  # the CPU limit, not the wall clock, ended it
    assert leftovers() == []


def test_wall_clock_kills_sleeping_program(sb):
    r = sb.run(code="import time; print('start', flush=True); time.sleep(100)", timeout_s=1.0)
    assert r.timed_out and r.signal == signal.SIGKILL and r.exit_code == 137
    assert r.stdout == "start\n" and r.stderr == ""
    assert 1.0 <= r.duration_s < 5.0


def test_bounded_fork_bomb_capped_by_nproc(sb):
    code = """
import json, os, time
n, err = 0, None
for _ in range(500):
    try:
        if os.fork() == 0:
            time.sleep(60); os._exit(0)
        n += 1
    except OSError as e:
        err = type(e).__name__; break
print(json.dumps({"forked": n, "error": err}))
"""
    r = sb.run(code=code, timeout_s=10)
    out = json.loads(r.stdout)
    assert out["error"] == "BlockingIOError"  # EAGAIN from RLIMIT_NPROC
    assert 0 < out["forked"] < 32
    assert r.exit_code == 0  # exited by itself; the sleeping children died with the namespace
    assert leftovers() == []


def test_classic_fork_bomb_contained_and_cleaned_up(sb):
    code = "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass\n"
    r = sb.run(code=code, timeout_s=2.0)
    assert r.timed_out
    assert r.duration_s < 6.0
    time.sleep(0.2)
    assert leftovers() == []


def test_10gb_allocation_is_memory_error(sb):
    r = sb.run(code="x = bytearray(10 * 2**30)", memory_mb=512)
    assert r.oom and not r.timed_out
    assert r.exit_code == 1 and r.stderr.rstrip().endswith("MemoryError")


def test_200mb_file_write_stops_at_file_size_limit(sb):
    code = """
import errno
written = 0
try:
    with open('big.bin', 'wb', buffering=0) as f:
        for _ in range(200):
            written += f.write(b'x' * 2**20)
except OSError as e:
    print(e.errno, written)
"""
    r = sb.run(code=code, limits=Limits(max_file_mb=50, work_mb=128))
    err_no, written = map(int, r.stdout.split())
    assert err_no == 27  # EFBIG "File too large" (Python ignores SIGXFSZ)
    assert written == 50 * 2**20


def test_workdir_tmpfs_is_size_capped(sb):
    code = """
written = 0
try:
    for i in range(100):
        with open(f'f{i}', 'wb') as f:
            written += f.write(b'x' * 2**20)
except OSError as e:
    print(e.errno, written)
"""
    r = sb.run(code=code, limits=Limits(max_file_mb=50, work_mb=8))
    err_no, written = map(int, r.stdout.split())
    assert err_no == 28 and written <= 8 * 2**20  # ENOSPC


@pytest.fixture()
def host_listeners():
    """Listening TCP sockets on 127.0.0.1 and on this host's own addresses (never an
    external address); yields [(ip, port)] and the number of accepted connections."""
    addrs = ["127.0.0.1"] + [a for a in subprocess.run(["hostname", "-I"], capture_output=True, text=True)
                             .stdout.split() if ":" not in a]
    socks, accepted = [], []
    for ip in addrs:
        s = socket.socket()
        s.bind((ip, 0))
        s.listen()
        s.settimeout(0.1)
        socks.append(s)

    stop = threading.Event()

    def accept_loop():
        while not stop.is_set():
            for s in socks:
                try:
                    accepted.append(s.accept())
                except (socket.timeout, OSError):
                    pass

    t = threading.Thread(target=accept_loop, daemon=True)
    t.start()
    yield [s.getsockname() for s in socks], accepted
    stop.set()
    t.join()
    for s in socks:
        s.close()


def test_network_isolated(sb, host_listeners):
    targets, accepted = host_listeners
    code = f"""
import json, socket
res = {{}}
for ip, port in {targets!r}:
    s = socket.socket(); s.settimeout(2)
    try:
        s.connect((ip, port)); res[ip] = 'connected'
    except OSError as e:
        res[ip] = e.errno
print(json.dumps(res))
print(open('/proc/net/route').read().count('\\n'))
print(sorted(n for _, n in socket.if_nameindex()))
"""
    r = sb.run(code=code)
    lines = r.stdout.splitlines()
    res = json.loads(lines[0])
    assert res["127.0.0.1"] == 111  # ECONNREFUSED: the sandbox's own loopback, not the host's
    for ip, _ in targets[1:]:
        assert res[ip] == 101  # ENETUNREACH: no route at all
    assert lines[1] == "1"  # /proc/net/route: header only
    assert lines[2] == "['lo']"
    time.sleep(0.2)
    assert accepted == []


def test_filesystem_isolated(sb):
    code = """
import json, os
def probe(fn):
    try:
        fn(); return 'ok'
    except OSError as e:
        return type(e).__name__ + ':' + str(e.errno)
print(json.dumps({
    'root': probe(lambda: os.listdir('/root')),
    'shadow': probe(lambda: open('/etc/shadow').read()),
    'write_usr': probe(lambda: open('/usr/evil', 'w')),
    'write_etc': probe(lambda: open('/etc/evil', 'w')),
    'append_passwd': probe(lambda: open('/etc/passwd', 'a')),
    'work': probe(lambda: os.listdir('/work')),
    'tmp': os.listdir('/tmp'),
}))
"""
    r = sb.run(code=code)
    out = json.loads(r.stdout)
    assert out["root"] == "FileNotFoundError:2"
    assert out["shadow"] == "PermissionError:13"
    assert out["write_usr"] == "OSError:30"  # EROFS
    assert out["write_etc"] == "OSError:30"
    assert out["append_passwd"] == "PermissionError:13"
    assert out["work"] == "FileNotFoundError:2"
    assert out["tmp"] == []


def test_no_leftover_processes_after_timeout(sb):
    code = """
import os, subprocess, time
subprocess.Popen(['sleep', '1000'], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(1000)
    os._exit(0)
print('spawned', flush=True)
while True:
    pass
"""
    r = sb.run(code=code, timeout_s=1.5)
    assert r.timed_out and r.stdout == "spawned\n"
    time.sleep(0.2)
    assert leftovers() == []


def test_no_state_shared_between_runs(sb):
    first = sb.run(code="open('/tmp/x', 'w').write('1'); open('y', 'w').write('1'); import os; print(os.getpid())")
    second = sb.run(code="import os; print(os.listdir('/tmp'), sorted(os.listdir('.')))")
    assert first.ok
    assert second.stdout.strip() == "[] ['main.py']"


def test_concurrent_runs_use_distinct_uids(sb):
    code = "import os, time, json; t = time.time(); time.sleep(0.4); print(json.dumps([os.getuid(), t, time.time()]))"
    results = []
    threads = [threading.Thread(target=lambda: results.append(json.loads(sb.run(code=code).stdout)))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4
    for i, (u1, s1, e1) in enumerate(results):
        for u2, s2, e2 in results[i + 1:]:
            if s1 < e2 and s2 < e1:  # overlapping runs
                assert u1 != u2
    assert max(sum(1 for _, s, e in results if s < t < e) for _, t, _ in results) <= 2


def test_host_pid_namespace_invisible(sb):
    r = sb.run(code="import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
    assert json.loads(r.stdout) == [1, 2]  # bwrap's init and the program: no host process visible


def test_sandbox_dies_with_a_killed_caller():
    """The caller is SIGKILLed mid-run: the sandboxed program must not outlive it."""
    import sys
    import textwrap

    caller = textwrap.dedent(f"""
        from agentrl_sandboxes.bwrap import BwrapSandbox
        sb = BwrapSandbox(slots=1, base_uid={BASE_UID + 40})
        print("ready", flush=True)
        sb.run(code="import time; time.sleep(1000)", timeout_s=1000)
    """)
    proc = subprocess.Popen([sys.executable, "-c", caller], stdout=subprocess.PIPE, text=True,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert proc.stdout.readline() == "ready\n"

    def caller_pids() -> list[int]:  # slot index = the first lock free machine-wide: another test worker's
        return [p for i in range(64) for p in uid_pids(BASE_UID + 40 + i)]  # sandbox may hold index 0

    try:
        deadline = time.monotonic() + 60
        while not caller_pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert caller_pids(), "the sandboxed program never started"
    finally:  # a failed wait must not leave the caller (and its sandbox) running
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 5
    while caller_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = [p for p in caller_pids() if open(f"/proc/{p}/stat").read().split(") ")[1][0] != "Z"]
    assert alive == []

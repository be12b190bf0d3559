"""Sandbox API: argument validation, files/stdin/env, output caps, backend selection, the
interpreter finder, slots and the unsafe backend's warning."""

from __future__ import annotations

import os
import stat
import tempfile

import pytest

from agentrl_sandboxes import Limits, SandboxUnavailableError, make_sandbox, select_backend
from agentrl_sandboxes.base import ExecResult, build_request, check_relpath
from agentrl_sandboxes.interpreter import build_sandbox_venv, find_python, world_accessible
from agentrl_sandboxes.slots import SlotPool


@pytest.fixture(scope="module")
def sb():
    from agentrl_sandboxes.bwrap import BwrapSandbox

    try:
        box = BwrapSandbox(slots=2)
    except SandboxUnavailableError as exc:
        pytest.skip(f"bwrap backend unavailable here: {exc}")
    yield box
    box.close()


def test_cmd_or_code_exactly_one():
    with pytest.raises(ValueError, match="exactly one"):
        build_request(None, None, None, None, None, Limits(), "python3")
    with pytest.raises(ValueError, match="exactly one"):
        build_request(["ls"], "print(1)", None, None, None, Limits(), "python3")
    with pytest.raises(ValueError, match="argv list"):
        build_request("ls -l", None, None, None, None, Limits(), "python3")


@pytest.mark.parametrize("bad", ["/etc/x", "../x", "a/../../x", "", "."])
def test_file_paths_must_stay_inside_workdir(bad):
    with pytest.raises(ValueError, match="relative path"):
        check_relpath(bad)


def test_limits_validation():
    with pytest.raises(ValueError, match="timeout_s"):
        Limits(timeout_s=0)
    with pytest.raises(ValueError, match="memory_mb"):
        Limits(memory_mb=0)
    assert Limits(timeout_s=2.5).cpu_limit_s == 3 and Limits(timeout_s=9, cpu_s=1).cpu_limit_s == 1


def test_files_stdin_env_and_argv(sb):
    r = sb.run(["python3", "-c", "import os,sys; print(open('pkg/data.txt').read(), sys.stdin.read(), os.environ['K'])"],
               files={"pkg/data.txt": "hello", "bin.dat": b"\x00\x01"}, stdin="from-stdin", env={"K": "v"})
    assert r.ok and r.stdout == "hello from-stdin v\n"
    r = sb.run(code="import helper; print(helper.X)", files={"helper.py": "X = 42"})
    assert r.stdout == "42\n"


def test_exit_code_and_traceback(sb):
    r = sb.run(code="import sys\nprint('out')\nsys.exit(3)")
    assert (r.exit_code, r.stdout, r.timed_out, r.oom, r.ok, r.signal) == (3, "out\n", False, False, False, None)
    r = sb.run(code="def f():\n    assert 1 == 2, 'boom'\nf()\n")
    assert r.exit_code == 1 and 'File "/sandbox/main.py", line 2, in f' in r.stderr
    assert r.stderr.rstrip().endswith("AssertionError: boom")


def test_output_is_capped_head_and_tail(sb):
    r = sb.run(code="print('A' * 100000 + 'END')", limits=Limits(max_output_bytes=1000))
    assert r.output_truncated
    assert r.stdout.startswith("A" * 500) and r.stdout.rstrip().endswith("END")
    assert "bytes omitted" in r.stdout and len(r.stdout) < 1100


def test_auto_picks_bwrap_and_says_why(sb):
    box = make_sandbox("auto", slots=1)
    try:
        assert box.name == "bwrap" and "bwrap works here" in box.chosen_because
    finally:
        box.close()
    assert select_backend(slots=1).name == "bwrap"


def test_unknown_backend_suggests_closest():
    with pytest.raises(KeyError, match="did you mean 'bwrap'"):
        make_sandbox("bwarp")


def test_unsafe_local_warns_and_is_never_auto():
    with pytest.warns(UserWarning, match="WITHOUT isolation"):
        box = make_sandbox("unsafe_local")
    r = box.run(code="print(6 * 7)", timeout_s=5)
    assert r.stdout == "42\n" and r.backend == "unsafe_local"


def test_interpreter_is_world_readable_and_pyenv_is_not():
    py = find_python()
    assert world_accessible(py.executable)
    if os.path.isdir("/root") and not os.stat("/root").st_mode & stat.S_IXOTH:
        assert not world_accessible("/root/.pyenv/shims/python3")
    with pytest.raises(SandboxUnavailableError, match="apt-get install python3"):
        find_python("/root/no-such-python")


def test_world_readable_venv_runs_in_sandbox(sb):
    from agentrl_sandboxes.bwrap import BwrapSandbox

    base = tempfile.mkdtemp(prefix="agentrl-venv-test-", dir="/tmp")
    os.chmod(base, 0o755)
    try:
        py = build_sandbox_venv(os.path.join(base, "venv"))
        box = BwrapSandbox(slots=1, python=py)
        r = box.run(code="import sys; print(sys.prefix)")
        assert r.ok and r.stdout.strip() == os.path.join(base, "venv")
    finally:
        import shutil

        shutil.rmtree(base)


def test_slot_pool_is_exclusive_across_pools(tmp_path):
    a = SlotPool(1, base_uid=5000, capacity=2, lock_dir=str(tmp_path))
    b = SlotPool(2, base_uid=5000, capacity=2, lock_dir=str(tmp_path))
    with a.acquire() as s1, b.acquire() as s2:
        assert {s1.uid, s2.uid} == {5000, 5001}
        from agentrl_sandboxes import SandboxBusyError

        with pytest.raises(SandboxBusyError, match="held by other processes"):
            with b.acquire(wait_s=0.05):
                pass
    with pytest.raises(ValueError, match="non-root"):
        SlotPool(1, base_uid=0)


def test_exec_result_ok_property():
    assert ExecResult("", "", 0, False, False, 0.1).ok
    assert not ExecResult("", "", 0, True, False, 0.1).ok


def test_cgroup_limits_when_writable():
    from agentrl_sandboxes import cgroups
    from agentrl_sandboxes.bwrap import BwrapSandbox

    ok, why = cgroups.probe()
    if not ok or os.geteuid() != 0:
        pytest.skip(f"per-slot cgroups not usable here: {why}")
    box = BwrapSandbox(slots=1, use_cgroups=True, base_uid=1_350_000)
    try:
        code = ("import os\nn = 0\nfor _ in range(100):\n    try:\n        if os.fork() == 0:\n"
                "            import time; time.sleep(30); os._exit(0)\n        n += 1\n    except OSError:\n"
                "        break\nprint(n)\n")
        r = box.run(code=code, limits=Limits(max_procs=10))
        assert r.stdout.strip().isdigit() and 0 < int(r.stdout) < 10, r
        (group,) = box._groups.values()  # whichever slot index was free
        assert group.leftover_pids() == [], r
    finally:
        box.close()


def test_auto_refuses_instead_of_running_unisolated(monkeypatch):
    import agentrl_sandboxes.select as sel

    def unavailable(name, **kw):
        raise SandboxUnavailableError(f"{name} missing in this test")

    monkeypatch.setattr(sel, "_construct", unavailable)
    with pytest.raises(SandboxUnavailableError) as err:
        make_sandbox("auto")
    msg = str(err.value)
    assert "bwrap: bwrap missing" in msg and "docker: docker missing" in msg
    assert "unsafe_local" in msg and "without isolation" in msg


def test_missing_bwrap_binary_is_actionable(monkeypatch):
    import agentrl_sandboxes.bwrap as bw

    monkeypatch.setattr(bw.shutil, "which", lambda tool: None if tool == "bwrap" else "/usr/bin/" + tool)
    with pytest.raises(SandboxUnavailableError, match="apt-get install bubblewrap"):
        bw.BwrapSandbox(slots=1)

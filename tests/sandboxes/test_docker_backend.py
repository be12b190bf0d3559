"""Docker backend: functional tests where a daemon answers (marker ``docker``, skipped with
the reason otherwise); where none answers, construction fails at once with a clear error."""

from __future__ import annotations

import time

import pytest

docker = pytest.importorskip("docker", reason="needs the docker extra: pip install 'agentrl[docker]'")

from agentrl_sandboxes import Limits, SandboxUnavailableError  # noqa: E402


def _daemon_error() -> str | None:
    try:
        client = docker.from_env()
        client.ping()
        client.close()
        return None
    except docker.errors.DockerException as exc:
        return str(exc)


DAEMON_ERROR = _daemon_error()


def test_no_daemon_fails_fast_with_clear_error():
    if DAEMON_ERROR is None:
        pytest.skip("a Docker daemon answers here; the no-daemon path is not reachable")
    from agentrl_sandboxes.docker import DockerSandbox

    start = time.monotonic()
    with pytest.raises(SandboxUnavailableError, match="no Docker daemon answered.*backend='bwrap'"):
        DockerSandbox()
    assert time.monotonic() - start < 2.0


def test_unreachable_tcp_daemon_fails_fast():
    from agentrl_sandboxes.docker import DockerSandbox

    start = time.monotonic()
    with pytest.raises(SandboxUnavailableError, match="no Docker daemon answered"):
        DockerSandbox(base_url="tcp://127.0.0.1:1")
    assert time.monotonic() - start < 2.0


@pytest.fixture(scope="module")
def dsb():
    if DAEMON_ERROR is not None:
        pytest.skip(f"no Docker daemon answers here: {DAEMON_ERROR}")
    from agentrl_sandboxes.docker import DockerSandbox

    box = DockerSandbox(slots=2, limits=Limits(timeout_s=10, max_procs=32))
    yield box
    box.close()


@pytest.mark.docker
def test_docker_runs_code_with_files_and_stdin(dsb):
    r = dsb.run(code="import sys, os; print(open('d.txt').read(), sys.stdin.read(), os.getuid())",
                files={"d.txt": "x"}, stdin="y")
    assert r.ok and r.stdout == "x y 65534\n" and r.backend == "docker"


@pytest.mark.docker
def test_docker_contains_loop_memory_and_network(dsb):
    r = dsb.run(code="while True: pass", timeout_s=2)
    assert r.timed_out
    r = dsb.run(code="x = bytearray(4 * 2**30)", memory_mb=256)
    assert r.oom
    r = dsb.run(code="import socket\ntry:\n    socket.create_connection(('127.0.0.1', 1), 1)\nexcept OSError as e:\n"
                     "    print(e.errno)\nprint(sorted(n for _, n in socket.if_nameindex()))")
    assert r.stdout.splitlines() == ["111", "['lo']"]


def test_container_kwargs_are_accepted_by_the_sdk_and_isolating():
    """Without a daemon: the SDK's own argument conversion accepts our create() kwargs."""
    from docker.models.containers import _create_container_args

    from agentrl_sandboxes.base import Limits, build_request
    from agentrl_sandboxes.docker import _tar, container_kwargs

    req = build_request(None, "print(1)", {"a/b.txt": "x"}, "in", None, Limits(memory_mb=256, max_procs=16), "python3")
    kw = container_kwargs(req)
    args = _create_container_args({"image": "img", "version": "1.44", **kw})
    host = args["host_config"]
    assert host["NetworkMode"] == "none" and host["CapDrop"] == ["ALL"]
    assert host["ShmSize"] == 16 * 2**20
    assert host["PidsLimit"] == 16 and host["Memory"] == 256 * 2**20 and host["MemorySwap"] == 256 * 2**20
    assert args["user"] == "65534:65534" and args["command"][:2] == ["sh", "-c"]
    import io
    import tarfile

    names = tarfile.open(fileobj=io.BytesIO(_tar(req.files))).getnames()
    assert sorted(names) == ["a/b.txt", "main.py"]

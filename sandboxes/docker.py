"""Docker backend through the docker SDK (extra ``docker``): one fresh container per run.

The container runs as nobody (65534) with no network, all capabilities dropped,
no-new-privileges, pids and memory limits (``OOMKilled`` is reported), rlimits CPU/FSIZE/
NOFILE, a size-capped ``/tmp`` tmpfs and the files copied into ``/sandbox`` with
``put_archive``; it is force-removed after every run. With no daemon the constructor fails
at once (~1 ms, ENVIRONMENTS.md §4.3) with ``SandboxUnavailableError``.
"""

from __future__ import annotations

import io
import os
import tarfile
import threading
import time
from typing import Mapping, Sequence

from agentrl_sandboxes._proc import minimal_env, signal_of
from agentrl_sandboxes.base import (
    WORKDIR, ExecRequest, ExecResult, Limits, SandboxError, SandboxUnavailableError, build_request, resolve_limits,
)

IMAGES_DIR = os.path.join(os.path.dirname(__file__), "images")
DEFAULT_IMAGE = "agentrl-sandbox-python:3.11"
_STDIN_FILE = ".stdin"


def _docker():
    try:
        import docker
    except ImportError as exc:
        raise SandboxUnavailableError("the docker backend needs the docker SDK: pip install 'agentrl[docker]'") from exc
    return docker


def _tar(files: Mapping[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel, data in files.items():
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.uid, info.gid, info.mtime = len(data), 0o644, 65534, 65534, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _cap(data: bytes, cap: int) -> tuple[str, bool]:
    truncated = len(data) > cap
    if truncated:
        half = cap // 2
        data = data[:half] + f"\n[... {len(data) - 2 * half} bytes omitted ...]\n".encode() + data[-half:]
    return data.decode("utf-8", errors="replace"), truncated


def container_kwargs(req: ExecRequest) -> dict:
    """Keyword arguments of ``containers.create`` for one request: nobody, no network, no
    capabilities, no-new-privileges, memory = memory+swap limit, pids limit, CPU/FSIZE/
    NOFILE ulimits, a size-capped /tmp and /dev/shm; stdin is read from a file copied in
    with the rest."""
    from docker.types import Ulimit

    lim, mib = req.limits, 1 << 20
    argv = list(req.argv)
    if req.stdin:
        argv = ["sh", "-c", f'exec "$@" < {_STDIN_FILE}', "sh", *argv]
    return dict(
        command=argv, user="65534:65534", working_dir=WORKDIR, environment=minimal_env(req.env, WORKDIR),
        network_mode="none", cap_drop=["ALL"], security_opt=["no-new-privileges"], mem_limit=f"{lim.memory_mb}m",
        memswap_limit=f"{lim.memory_mb}m", pids_limit=lim.max_procs, tmpfs={"/tmp": f"size={lim.tmp_mb}m"},
        shm_size=f"{lim.shm_mb}m",
        ulimits=[Ulimit(name="cpu", soft=lim.cpu_limit_s, hard=lim.cpu_limit_s + 1),
                 Ulimit(name="fsize", soft=lim.max_file_mb * mib, hard=lim.max_file_mb * mib),
                 Ulimit(name="nofile", soft=lim.max_open_files, hard=lim.max_open_files)],
        detach=True)


class DockerSandbox:
    """Docker backend (``name = "docker"``). Thread-safe; ``slots`` containers at a time.

    Args:
        image: image to run (built from ``images/python.Dockerfile`` when absent and
            ``build`` is true).
        limits: default ``Limits``.
        slots: concurrent containers.
        base_url: daemon address (default: ``DOCKER_HOST`` / the local socket).
    Raises:
        SandboxUnavailableError: SDK missing, no daemon answering, or image missing with
            ``build=False``; the message names the fix.
    """

    name = "docker"

    def __init__(self, *, image: str = DEFAULT_IMAGE, limits: Limits | None = None, slots: int = 4,
                 base_url: str | None = None, build: bool = True) -> None:
        docker = _docker()
        self._errors = docker.errors
        try:
            self.client = docker.DockerClient(base_url=base_url) if base_url else docker.from_env()
            self.client.ping()
        except docker.errors.DockerException as exc:
            raise SandboxUnavailableError(
                f"no Docker daemon answered ({exc}); start dockerd or set DOCKER_HOST, or use backend='bwrap'") from exc
        self.image, self.limits = image, limits or Limits()
        self._sem = threading.BoundedSemaphore(slots)
        self._ensure_image(build)

    def _ensure_image(self, build: bool) -> None:
        try:
            self.client.images.get(self.image)
        except self._errors.ImageNotFound:
            if not build:
                raise SandboxUnavailableError(f"image {self.image!r} not found; build it from {IMAGES_DIR}") from None
            self.client.images.build(path=IMAGES_DIR, dockerfile="python.Dockerfile", tag=self.image, rm=True)

    def _create(self, req: ExecRequest):
        return self.client.containers.create(self.image, **container_kwargs(req))

    def run(self, cmd: Sequence[str] | None = None, *, code: str | None = None,
            files: Mapping[str, str | bytes] | None = None, stdin: str | bytes | None = None,
            env: Mapping[str, str] | None = None, timeout_s: float | None = None, memory_mb: int | None = None,
            limits: Limits | None = None) -> ExecResult:
        """Run ``cmd`` or ``code`` in a fresh container (see ``Sandbox``).

        Raises:
            SandboxError: the daemon failed (API error, container vanished).
        """
        lim = resolve_limits(self.limits, limits, timeout_s, memory_mb)
        req = build_request(cmd, code, files, stdin, env, lim, "python3")
        with self._sem:
            try:
                return self._run(req)
            except self._errors.DockerException as exc:
                raise SandboxError(f"docker backend failed: {exc}") from exc

    def _run(self, req: ExecRequest) -> ExecResult:
        files = dict(req.files)
        if req.stdin:
            files[_STDIN_FILE] = req.stdin
        container = self._create(req)
        try:
            if files:
                container.put_archive(WORKDIR, _tar(files))
            start = time.monotonic()
            container.start()
            timed_out = False
            try:
                code = int(container.wait(timeout=req.limits.timeout_s)["StatusCode"])
            except Exception:  # requests' ReadTimeout/ConnectionError: the wall clock expired
                timed_out = True
                container.kill()
                code = int(container.wait(timeout=30)["StatusCode"])
            duration = time.monotonic() - start
            container.reload()
            oom = bool(container.attrs["State"].get("OOMKilled"))
            out, t1 = _cap(container.logs(stdout=True, stderr=False), req.limits.max_output_bytes)
            err, t2 = _cap(container.logs(stdout=False, stderr=True), req.limits.max_output_bytes)
        finally:
            container.remove(force=True)
        sig = signal_of(code)
        return ExecResult(stdout=out, stderr=err, exit_code=code, timed_out=timed_out or sig == 24,
                          oom=oom or "MemoryError" in err[-2000:], duration_s=duration, backend=self.name,
                          signal=sig, output_truncated=t1 or t2)

    def close(self) -> None:
        """Close the daemon connection (idempotent)."""
        try:
            self.client.close()
        except Exception:
            pass

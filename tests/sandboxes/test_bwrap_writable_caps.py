"""Every writable place in the bwrap sandbox is size-capped or read-only (issue 20 item 2).

A tmpfs without ``size=`` takes host RAM past the run's memory limit: bwrap's own root and
``/dev`` used to be such tmpfs. The payload writes 1 MiB files (below RLIMIT_FSIZE, so only
the filesystem can stop it) into each place until an error or 12 MiB, with caps of 4 MiB,
so the test writes at most a few tens of MiB even when a cap is missing.
"""

from __future__ import annotations

import errno
import json

import pytest

from agentrl_sandboxes import Limits

BASE_UID = 1_310_000
CAP_MB, TRY_MB = 4, 12
PLACES = ("/", "/dev", "/dev/shm", "/tmp", "/sandbox", "/proc", "/usr", "/etc")

FILL = """
import json, os
out = {}
for place in %r:
    written, err = 0, None
    try:
        for i in range(%d):
            with open(os.path.join(place, f"fill{i}"), "wb") as f:
                written += f.write(b"x" * 2**20)
    except OSError as e:
        err = e.errno
    out[place] = [written, err]
print(json.dumps(out))
""" % (PLACES, TRY_MB)


@pytest.fixture(scope="module")
def sb():
    from agentrl_sandboxes import SandboxUnavailableError
    from agentrl_sandboxes.bwrap import BwrapSandbox

    try:
        box = BwrapSandbox(slots=1, base_uid=BASE_UID)
    except SandboxUnavailableError as exc:
        pytest.skip(f"bwrap backend unavailable here: {exc}")
    yield box
    box.close()


def test_no_writable_place_takes_more_than_its_cap(sb):
    limits = Limits(memory_mb=256, max_file_mb=2, work_mb=CAP_MB, tmp_mb=CAP_MB, shm_mb=CAP_MB, timeout_s=20)
    r = sb.run(code=FILL, limits=limits)
    assert r.ok, r.stderr
    out = {place: tuple(v) for place, v in json.loads(r.stdout).items()}
    for place in ("/", "/dev", "/usr", "/etc"):  # read-only: nothing written
        assert out[place] == (0, errno.EROFS), (place, out)
    for place in ("/dev/shm", "/tmp", "/sandbox"):  # size-capped tmpfs: full before the cap is passed
        written, err = out[place]
        assert err == errno.ENOSPC and written <= CAP_MB << 20, (place, out)
    assert out["/proc"][0] == 0
    total = sum(w for w, _ in out.values())
    assert total <= 3 * CAP_MB << 20  # the sum of the three caps: nothing else took host RAM


def test_devices_and_python_still_work_with_read_only_dev(sb):
    code = """
import multiprocessing, os, tempfile
open('/dev/null', 'w').write('x')
assert len(open('/dev/urandom', 'rb').read(8)) == 8
with tempfile.NamedTemporaryFile(dir='/dev/shm') as f:
    f.write(b'ok')
lock = multiprocessing.Lock()   # POSIX semaphore in /dev/shm
with lock:
    pass
print('ok')
"""
    r = sb.run(code=code)
    assert r.ok and r.stdout == "ok\n", r.stderr


def test_shm_mb_is_validated():
    with pytest.raises(ValueError, match="shm_mb"):
        Limits(shm_mb=0)

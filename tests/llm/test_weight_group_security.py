"""Issue 52, defect 1: the trainer's weight store as an attacker on the same machine sees it.

Before: the store listened on every interface (``*:PORT``, IPv4 and IPv6) and a process that knew
only the port could write ``push/<seq> = rejoin <its own store>`` or a version of its own, and
the engines followed. Now the store listens on the address the engines dial only (loopback
here), every key sits under the run's secret, each control message carries an HMAC under it,
and receivers refuse versions that go back. The attacker can list the keys (``TCPStore`` has no
authorization), but what it writes is ignored."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

import torch.distributed as dist  # noqa: E402

from agentrl.llm.weight_broadcast import WeightLayout, WeightReceiver, WeightSender  # noqa: E402
from agentrl.llm.weight_store import serve_store, sign, verify  # noqa: E402


def _listening(port: int) -> list[str]:
    """The local addresses (hex, as /proc/net/tcp{,6} write them) listening on ``port``."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.read().splitlines()[1:]:
                cols = line.split()
                address, state = cols[1], cols[3]
                if state == "0A" and int(address.rsplit(":", 1)[1], 16) == port:
                    out.append(address.rsplit(":", 1)[0])
    return out


def _state(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"a": torch.randn(16, 4, generator=g), "b": torch.randn(8, generator=g)}


@pytest.fixture()
def group():
    """A sender and 2 receivers (threads) on loopback, version 1 pushed and staged."""
    lay = WeightLayout.of(_state(0), bucket_bytes=256)
    sender = WeightSender(lay, 2, timeout_s=60)
    address = sender.open()
    receivers = [None, None]

    def join(k):
        receivers[k] = WeightReceiver(address, k + 1, lay, poll_s=0.005)

    threads = [threading.Thread(target=join, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    sender.form()
    for t in threads:
        t.join()
    sender.push(_state(1), 1)
    assert all(r.wait(1, timeout_s=30) == 1 for r in receivers)
    yield sender, receivers, address
    sender.close()
    for r in receivers:
        r.close()


def test_the_store_listens_on_loopback_only():
    store = serve_store("127.0.0.1", None, 10)
    assert _listening(int(store.port)) == ["0100007F"]  # 127.0.0.1, no 0.0.0.0 and no [::]


def test_a_signed_message_verifies_only_at_its_own_place():
    value = sign("s3cret", 4000, 2, "7")
    assert verify("s3cret", 4000, 2, value) == "7"
    assert verify("other", 4000, 2, value) is None  # another secret
    assert verify("s3cret", 4000, 3, value) is None  # replayed at another sequence number
    assert verify("s3cret", 4001, 2, value) is None  # or into another store
    assert verify("s3cret", 4000, 2, "999") is None and verify("s3cret", 4000, 2, "999|00") is None


def test_an_attacker_who_knows_the_port_cannot_move_or_feed_the_engines(group):
    sender, receivers, address = group
    assert address.secret not in repr(address)
    assert _listening(address.port) == ["0100007F"]
    attacker = dist.TCPStore("127.0.0.1", address.port, None, False, timedelta(seconds=10))
    keys = attacker.list_keys()  # no authorization in a TCPStore: the keys are readable...
    pushed = next(k for k in keys if k.endswith("/push/0"))
    prefix = pushed[: -len("push/0")]
    # ... so it tries: replay the signed first push as the next one, move the engines to its own
    # store, and push its own version (unsigned, or with a made-up tag)
    rogue = dist.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=10), wait_for_workers=False)
    for value in (attacker.get(pushed).decode(), f"rejoin 127.0.0.1:{rogue.port}", "999", "999|" + "0" * 64):
        attacker.set(prefix + "push/1", value)
        time.sleep(0.1)  # the receivers poll every 5 ms
        assert [r.version for r in receivers] == [1, 1]  # nothing staged, no error, still in the group
    attacker.set("push/1", "999")  # outside the run's prefix: not even looked at
    new = _state(2)
    sender.push(new, 2)  # the trainer's own write replaces the attacker's: the group works on
    for r in receivers:
        assert r.wait(2, timeout_s=30) == 2
        staged = r._staged
        assert torch.equal(staged["a"], new["a"]) and torch.equal(staged["b"], new["b"])


def test_a_version_that_goes_back_stops_the_receivers(group):
    sender, receivers, _ = group
    sender.push(_state(3), 5)
    assert all(r.wait(5, timeout_s=30) == 5 for r in receivers)
    sender._say(sender._keys, int(sender._store.port), sender._seq, "4")  # a signed but older version
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and receivers[0]._error is None:
        time.sleep(0.02)
    with pytest.raises(RuntimeError, match="pushed policy version 4 after 5: an engine accepts only versions"):
        receivers[0].version

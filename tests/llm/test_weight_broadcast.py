"""The trainer → engine weight group (``agentrl.llm.weight_broadcast``) on gloo, in one process:
the layout (buckets, alignment, tied tensors), a versioned push reaching every receiver bit for
bit, staged weights never overwritten by a later push, and a regroup that brings in a new member
and re-sends the last push to it."""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from agentrl.llm.weight_broadcast import ALIGN, WeightLayout, WeightReceiver, WeightSender  # noqa: E402


class _Engine:
    """Stand-in engine: remembers what ``update_weights`` loaded."""

    def __init__(self) -> None:
        self.state, self.policy_version = None, -1

    def update_weights(self, state, version):
        self.state, self.policy_version = {k: v.clone() for k, v in state.items()}, version


def _state(seed: float = 0.0) -> dict:
    g = torch.Generator().manual_seed(int(seed))
    emb = torch.randn(7, 3, generator=g)
    return {"model.embed_tokens.weight": emb, "norm": torch.randn(5, generator=g).to(torch.bfloat16),
            "odd": torch.randn(3, generator=g).to(torch.float16), "big": torch.randn(40, 4, generator=g),
            "lm_head.weight": emb}


def _join(address, layout, n, ranks=None):
    out = [None] * n

    def run(k):
        out[k] = WeightReceiver(address, k + 1, layout)

    threads = [threading.Thread(target=run, args=(k,)) for k in (range(n) if ranks is None else ranks)]
    for t in threads:
        t.start()
    return out, threads


def test_layout_buckets_aligns_and_sends_tied_tensors_once():
    lay = WeightLayout.of(_state(), bucket_bytes=100)
    assert "lm_head.weight" not in lay.names and lay.aliases == (("lm_head.weight", "model.embed_tokens.weight"),)
    assert all(o % ALIGN == 0 for o in lay.offsets)
    # embedding 84 B (padded to 96) + norm 10 B > 100 → split; norm + odd fit; big (640 B) alone
    assert [(a, b) for a, b, _ in lay.buckets] == [(0, 1), (1, 3), (3, 4)]
    with pytest.raises(ValueError, match="weight_bucket_mb"):
        WeightLayout.of(_state(), bucket_bytes=0)


def test_push_reaches_every_receiver_versioned_and_staged_buffers_stay():
    state = _state(1)
    lay = WeightLayout.of(state, bucket_bytes=64)
    sender = WeightSender(lay, 2, timeout_s=60)
    address = sender.open()
    receivers, threads = _join(address, lay, 2)
    sender.form()
    for t in threads:
        t.join()
    try:
        sender.push(state, 3)
        engines = [_Engine(), _Engine()]
        for r, e in zip(receivers, engines):
            assert r.wait(3, timeout_s=30) == 3 and r.load_into(e) == 3
            assert e.policy_version == 3 and e.state.keys() == state.keys()
            assert all(torch.equal(e.state[k], state[k]) and e.state[k].dtype == state[k].dtype for k in state)
        first = engines[0].state
        newer = _state(2)
        sender.push(newer, 4)
        assert receivers[0].wait(4, timeout_s=30) == 4
        assert all(torch.equal(first[k], state[k]) for k in state)  # a later push never writes loaded weights
        receivers[0].load_into(engines[0])
        assert torch.equal(engines[0].state["big"], newer["big"]) and engines[0].policy_version == 4
        with pytest.raises(KeyError, match="same state-dict layout"):
            sender.push({"big": newer["big"]}, 5)
    finally:
        sender.close()


def test_regroup_brings_a_new_member_and_resends_the_last_push():
    state = _state(3)
    lay = WeightLayout.of(state)
    sender = WeightSender(lay, 2, timeout_s=60)
    receivers, threads = _join(sender.open(), lay, 2)
    sender.form()
    for t in threads:
        t.join()
    try:
        sender.push(state, 1)
        assert receivers[1].wait(1, timeout_s=30) == 1
        receivers[1].close()  # "dies"; a fresh member takes rank 2 in a new group, the live one rejoins
        address = sender.regroup()
        fresh, t2 = _join(address, lay, 2, ranks=[1])  # only rank 2 is new; rank 1 rejoins from its thread
        sender.form()
        t2[0].join()
        sender.resend()
        new = fresh[1]
        assert new is not None and new.wait(1, timeout_s=30) == 1
        sender.push(_state(4), 2)
        assert receivers[0].wait(2, timeout_s=30) == 2 and new.wait(2, timeout_s=30) == 2
        e = _Engine()
        new.load_into(e)
        assert torch.equal(e.state["big"], _state(4)["big"])
    finally:
        sender.close()


def test_store_takes_the_first_free_port_of_its_range_and_says_when_none_is_left():
    import socket

    with socket.socket() as s:  # a port that was free a moment ago, then its neighbour range
        s.bind(("127.0.0.1", 0))
        first = s.getsockname()[1]
    lay = WeightLayout.of(_state())
    a = WeightSender(lay, 1, ports=(first, first + 1))
    b = WeightSender(lay, 1, ports=(first, first + 1))
    try:
        assert a.open().port == first and b.open().port == first + 1  # the first port is a's: b takes the next
        with pytest.raises(RuntimeError, match="no free port for the weight store"):
            WeightSender(lay, 1, ports=(first, first)).open()
    finally:
        a.close()
        b.close()


def _own_ip() -> str | None:
    """This machine's address on its default route (no packet is sent), None without one."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.254", 9))
            ip = s.getsockname()[0]
        except OSError:
            return None
    return None if ip.startswith("127.") else ip


def test_gloo_connections_use_the_bind_address(monkeypatch):
    """With ``bind`` (a node IP, as Ray engine actors pass) every member's gloo connections are on
    that address, not on the loopback address the host name may resolve to."""
    psutil = pytest.importorskip("psutil")
    ip = _own_ip()
    if ip is None:
        pytest.skip("no non-loopback address on this machine")
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    state = _state(5)
    lay = WeightLayout.of(state)

    def established() -> set:
        return {(c.laddr, c.raddr) for c in psutil.Process().net_connections("tcp") if c.raddr
                and c.status == "ESTABLISHED"}

    before = established()
    sender = WeightSender(lay, 1, host=ip, timeout_s=60, bind=ip)
    address = sender.open()
    out = [None]
    thread = threading.Thread(target=lambda: out.__setitem__(0, WeightReceiver(address, 1, lay, bind=ip)))
    thread.start()
    sender.form()
    thread.join()
    try:
        sender.push(state, 1)
        assert out[0].wait(1, timeout_s=30) == 1
        pairs = [(lo, re) for lo, re in established() - before if address.port not in (lo.port, re.port)]
        assert pairs and all(lo.ip == ip and re.ip == ip for lo, re in pairs), pairs  # gloo's, not the store's
    finally:
        out[0].close()
        sender.close()

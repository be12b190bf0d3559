"""Property tests: any Turn round-trips bit-exactly; threads share one TurnStore safely."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrl.store import TurnStore
from agentrl.types import Episode, Turn

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@st.composite
def turns(draw, t: int) -> Turn:
    c = draw(st.integers(0, 6))
    i32 = st.integers(-2**31, 2**31 - 1)
    f32 = st.floats(width=32, allow_nan=True, allow_infinity=True)
    return Turn(
        run_id="", episode_id=-1, group_id=7, t=t, observation=draw(st.text()), anchor_obs=draw(st.text()),
        action=draw(st.text()), action_valid=draw(st.booleans()),
        reward=draw(st.none() | st.floats(allow_nan=False, allow_infinity=False)),
        terminated=draw(st.booleans()), truncated=draw(st.booleans()), next_anchor_obs=draw(st.text()),
        prompt_ids=np.array(draw(st.lists(i32, max_size=20)), dtype=np.int32),
        completion_ids=np.array(draw(st.lists(i32, min_size=c, max_size=c)), dtype=np.int32),
        completion_logprobs=np.array(draw(st.lists(f32, min_size=c, max_size=c)), dtype=np.float32),
        policy_version=draw(st.integers(0, 2**40)),
        hidden=draw(st.none() | st.lists(f32, max_size=8).map(lambda v: np.array(v, dtype=np.float32))),
        info=draw(st.dictionaries(st.text(max_size=6), _json, max_size=4)),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_turn_round_trips(tmp_path, data):
    ts = [data.draw(turns(t)) for t in range(data.draw(st.integers(1, 3)))]
    ep = Episode(-1, 7, "x/Y-v0", data.draw(st.text()), data.draw(st.integers(-2**63, 2**63 - 1)), turns=ts)
    with TurnStore(tmp_path / "s.sqlite") as store:  # one file for all examples; runs may repeat
        store.add_episodes([ep], run_id=data.draw(st.text(min_size=1)))
        got = store.load_episodes(ep.run_id, [ep.episode_id])[0]
    assert (got.task_id, got.seed, got.group_id) == (ep.task_id, ep.seed, ep.group_id)
    for a, b in zip(ep.turns, got.turns, strict=True):
        for f in dataclasses.fields(Turn):
            x, y = getattr(a, f.name), getattr(b, f.name)
            if isinstance(x, np.ndarray):
                assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), f.name  # NaN payloads too
            else:
                assert x == y, f.name


def test_threads_share_one_store(tmp_path):
    store = TurnStore(tmp_path / "s.sqlite")
    errors: list[BaseException] = []

    def write(tag: str) -> None:
        try:
            for _ in range(10):
                eps = [Episode(-1, 0, "x", tag, 0, turns=[Turn("", -1, 0, t, "o", "a", "act", True, 0.0)
                                                          for t in range(3)]) for _ in range(5)]
                store.add_episodes(eps, run_id="r")
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(tag,)) for tag in "ab"]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    recs = store.episodes("r")
    table = store.table("r")
    store.close()
    assert len(recs) == 100 and sum(r.task_id == "a" for r in recs) == 50
    assert sorted(table.turn_id.tolist()) == list(range(300))

"""Broker sessions count the controller's running time (issue 28): a stall of the
controller's own process fences nobody, a silent broker is still fenced after a session of
running time, and the broker in the controller's own process is never fenced for silence.
Virtual time throughout."""

from __future__ import annotations

import pytest
from test_controller import SESSION, Cluster, fenced

from eddy.cluster.controller import ControllerConfig
from eddy.metadata.commands import UnfenceBroker

STALL = 5000


def test_a_stall_of_the_controller_fences_nobody() -> None:
    c = Cluster(nodes=(1, 2, 3))
    c.create("t", 3, 3)
    c.run(1000, alive=(1, 2, 3))
    c.now += STALL  # the controller's process did not run: its next tick comes 5 s late
    assert fenced(c.tick()) == []  # before the heartbeats that waited meanwhile are read
    assert fenced(c.heartbeat(1, 2, 3)) == []
    assert fenced(c.run(c.now + 3 * SESSION, alive=(1, 2, 3))) == []
    assert len(c.state.live_brokers()) == 3
    assert c.controller.stalls == 1 and c.controller.last_stall_ms == STALL


def test_a_heartbeat_read_first_after_a_stall_does_not_leave_the_others_fenced() -> None:
    c = Cluster(nodes=(1, 2, 3))
    c.run(1000, alive=(1, 2, 3))
    c.now += STALL
    assert fenced(c.heartbeat(1)) == []  # one broker's heartbeat is read before the tick
    assert fenced(c.tick()) == []
    assert fenced(c.heartbeat(2, 3)) == []
    assert len(c.state.live_brokers()) == 3


def test_a_silent_broker_is_fenced_after_a_session_of_running_time() -> None:
    c = Cluster(nodes=(1, 2, 3))
    c.run(1000, alive=(1, 2, 3))  # broker 3's last heartbeat at t=1000
    c.run(1200, alive=(1, 2))
    c.now = 1200 + STALL  # the controller stalls for 5 s
    assert fenced(c.tick()) == []
    # 200 ms of its session ran before the stall: 1300 ms are left after it
    deadline = 1000 + SESSION + STALL
    assert fenced(c.run(deadline - 10, alive=(1, 2))) == []
    assert c.state.is_live(3)
    c.now = deadline - 1
    assert fenced(c.tick()) == []
    c.now = deadline
    assert fenced(c.tick()) == [3]


def test_gaps_below_the_stall_limit_are_running_time() -> None:
    c = Cluster(nodes=(1, 2, 3))
    c.run(1000, alive=(1, 2, 3))
    limit = c.config.stall_limit_ms
    assert limit == 2 * c.config.heartbeat_interval_ms
    out = []
    while c.now < 1000 + SESSION:  # ticks a little under the limit apart
        c.now = min(1000 + SESSION, c.now + limit)
        out += c.heartbeat(1, 2) + c.tick()
    assert fenced(out) == [3]
    assert c.controller.stalls == 0


def test_a_broker_that_died_before_the_stall_keeps_no_extra_time() -> None:
    c = Cluster(nodes=(1, 2, 3))
    c.run(1000, alive=(1, 2, 3))
    c.run(1000 + SESSION - 10, alive=(1, 2))
    c.now = 1000 + SESSION
    assert fenced(c.controller.tick(c.now)) == [3]  # in flight when the stall begins
    c.now += STALL
    c.heartbeat(1, 2)
    assert c.controller.live_brokers(c.now) == {1, 2}  # its session ended before the stall


def test_the_stall_limit_must_exceed_the_tick_interval() -> None:
    assert ControllerConfig().stall_limit_ms == 500
    assert ControllerConfig(stall_after_ms=2000).stall_limit_ms == 2000
    with pytest.raises(ValueError, match="stall_after_ms"):
        ControllerConfig(stall_after_ms=250)
    with pytest.raises(ValueError, match="local_broker"):
        ControllerConfig(local_broker=-2)


# -- the broker in the controller's own process -----------------------------------------------
def test_the_only_broker_of_a_one_node_cluster_is_never_fenced() -> None:
    c = Cluster(nodes=(1,), local_broker=1)
    c.run(1000, alive=(1,))
    # its heartbeats are local calls: its silence is this process's, however long
    assert fenced(c.run(60_000, alive=())) == []
    assert c.state.is_live(1)
    assert c.controller.to_probe(c.now) == []
    c.create("t", 2, 1)  # placed on it
    assert all(p.replicas == (1,) and p.leader == 1 for p in c.parts("t"))


def test_the_local_broker_is_spared_and_the_others_are_not() -> None:
    c = Cluster(nodes=(1, 2, 3), local_broker=1)
    c.run(1000, alive=(1, 2, 3))
    commands = c.run(10_000, alive=(2,))
    assert fenced(commands) == [3]
    assert c.state.is_live(1) and c.state.is_live(2)


def test_the_local_broker_registered_again_needs_its_heartbeat_to_be_unfenced() -> None:
    c = Cluster(nodes=(1, 2), local_broker=1)
    c.run(1000, alive=(1, 2))
    c.register(1)  # a new epoch: fenced by the registration itself
    c.run(2000, alive=(2,))
    assert not c.state.is_live(1)
    assert c.heartbeat(1)[0] == UnfenceBroker(1, 2)
    assert c.state.is_live(1)

"""ElectLeaders naming a partition more than once (a raw request can; librdkafka and the
Java admin send a set): each partition gets one outcome, a topic named twice one entry."""

from __future__ import annotations

from test_controller import Cluster, _expand_isrs

from eddy.cluster.controller.elections import PREFERRED, UNCLEAN, ElectionOutcome
from eddy.protocol.errors import ErrorCode

E = ErrorCode


def _rows(planned: list[tuple[str, list[ElectionOutcome]]]) -> list[tuple[str, int]]:
    return [(name, o.partition) for name, outs in planned for o in outs]


def _moved_cluster() -> tuple[Cluster, int]:
    """A cluster where partition ``first`` of "t" is led by another than its preferred
    replica (broker 1), which is back in the ISR: a preferred election moves it."""
    c = Cluster(nodes=(1, 2, 3), auto_leader_rebalance=False)
    c.create("t", 6, 3)
    c.run(3000, alive=(2, 3))
    c.heartbeat(1)
    c.run(3500, alive=(1, 2, 3))
    _expand_isrs(c, "t")
    first = next(i for i, p in enumerate(c.parts("t")) if p.replicas[0] == 1)
    assert c.parts("t")[first].leader != 1
    return c, first


def test_a_partition_named_twice_gets_one_outcome_and_one_command() -> None:
    c, first = _moved_cluster()
    planned = c.controller.elect_leaders(PREFERRED, [("t", [first, first])], c.now)
    assert _rows(planned) == [("t", first)]
    outcome = planned[0][1][0]
    assert outcome.code == E.none and outcome.command is not None


def test_a_topic_named_twice_is_one_entry_in_first_named_order() -> None:
    c, first = _moved_cluster()
    other = next(i for i in range(6) if i != first)
    planned = c.controller.elect_leaders(
        PREFERRED, [("t", [first]), ("nope", [0]), ("t", [other, first])], c.now)
    assert [name for name, _ in planned] == ["t", "nope"]
    assert _rows(planned) == [("t", first), ("t", other), ("nope", 0)]
    assert sum(o.command is not None for _, outs in planned for o in outs) == 1


def test_errors_named_twice_are_answered_once() -> None:
    c = Cluster(nodes=(1, 2, 3))
    c.create("t", 1, 3)
    planned = c.controller.elect_leaders(
        UNCLEAN, [("t", [0, 7, 7, 0]), ("gone", [1, 1]), ("gone", [1])], c.now)
    assert planned == [
        ("t", [ElectionOutcome(0, E.election_not_needed,
                               "Leader election not needed for topic partition."),
               ElectionOutcome(7, E.unknown_topic_or_partition, "No such partition as t-7")]),
        ("gone", [ElectionOutcome(1, E.unknown_topic_or_partition,
                                  "No such topic as gone")]),
    ]

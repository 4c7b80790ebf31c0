"""The controller Metadata and DescribeCluster name (issue 28: every node named itself):
a live broker, the same whichever node answers."""

from __future__ import annotations

from eddy.cluster.service import named_controller
from eddy.metadata import MetadataState, encode_command
from eddy.metadata.commands import RegisterBroker, UnfenceBroker


def _state(live: tuple[int, ...], fenced: tuple[int, ...] = ()) -> MetadataState:
    """Brokers ``live`` and ``fenced`` registered (a registration leaves one fenced), the
    ``live`` ones unfenced."""
    state = MetadataState()
    for node in sorted((*live, *fenced)):
        commands = [RegisterBroker(node, bytes([node]) * 32, None, f"h:{node}", f"m:{node}",
                                   1)]
        if node in live:
            commands.append(UnfenceBroker(node, 1))
        for command in commands:
            assert state.apply_bytes(encode_command(command)).ok
    return state


def test_the_metadata_leader_when_it_is_a_live_broker() -> None:
    state = _state((1, 2, 3))
    assert named_controller(state, 2) == 2
    assert named_controller(state, 3) == 3


def test_else_the_lowest_live_broker() -> None:
    state = _state((2, 3), fenced=(1,))
    assert named_controller(state, 0) == 2  # no leader known (an election)
    assert named_controller(state, 1) == 2  # the leader's broker is fenced
    assert named_controller(state, 7) == 2  # a controller-only node: not a broker
    assert named_controller(_state((), fenced=(1,)), 1) == -1
    assert named_controller(MetadataState(), 0) == -1

"""Consumer groups: the sans-IO classic-protocol coordinator and its offsets store, and the
broker's service that runs it (``service``, on the ``offsets`` Raft group: ``raft_store``).

- :mod:`eddy.groups.state`: :class:`GroupCoordinator`, the group state machine.
- :mod:`eddy.groups.offsets`: :class:`OffsetStore`, committed offsets applied once durable.
- :mod:`eddy.groups.records`: Kafka's ``__consumer_offsets`` record formats.
"""

from eddy.groups.offsets import OffsetStore
from eddy.groups.records import Record, partition_for
from eddy.groups.state import GroupConfig, GroupCoordinator, GroupState, Step, Write

__all__ = [
    "GroupConfig",
    "GroupCoordinator",
    "GroupState",
    "OffsetStore",
    "Record",
    "Step",
    "Write",
    "partition_for",
]

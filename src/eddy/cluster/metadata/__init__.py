"""The ``metadata`` Raft group's state machine: commands (``commands``), records
(``records``) and ``MetadataState``."""

from eddy.cluster.metadata.commands import MetadataCommand, decode_command, encode_command
from eddy.cluster.metadata.records import NO_LEADER
from eddy.cluster.metadata.result import ApplyResult, Rejected
from eddy.cluster.metadata.state import MetadataSnapshotError, MetadataState

__all__ = [
    "NO_LEADER",
    "ApplyResult",
    "MetadataCommand",
    "MetadataSnapshotError",
    "MetadataState",
    "Rejected",
    "decode_command",
    "encode_command",
]

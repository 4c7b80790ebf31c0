"""The ``metadata`` Raft group's state machine: commands (``commands``), records
(``records``) and ``MetadataState``."""

from eddy.metadata.commands import MetadataCommand, decode_command, encode_command
from eddy.metadata.records import NO_LEADER
from eddy.metadata.result import ApplyResult, Rejected
from eddy.metadata.state import MetadataSnapshotError, MetadataState

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

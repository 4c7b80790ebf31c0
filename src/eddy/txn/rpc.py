"""Transaction markers between brokers (tag 0x07, control range of seed 000): the
transaction coordinator asks the leader of each partition of a transaction to write its
commit or abort marker, as Kafka's WriteTxnMarkers does. One postcard message each way.

Only a registered broker may ask (the receiver checks the sender's mesh key against the
metadata state); the answer gives an error code per partition (NOT_LEADER_OR_FOLLOWER where
the receiver does not lead it, so the coordinator asks the new leader).
"""

from __future__ import annotations

from dataclasses import dataclass

from eddy import postcard
from eddy.postcard import I16, I32, I64
from eddy.protocol.errors import ErrorCode

#: the most partitions one request names (a transaction's partitions, bounded by Kafka's
#: own limits far below this)
MAX_MARKER_PARTITIONS = 100_000


@dataclass(frozen=True, slots=True)
class WriteMarkersRequest:
    producer_id: I64
    producer_epoch: I16
    commit: bool
    partitions: tuple[tuple[str, I32], ...]
    #: the coordinator's epoch (the offsets group's term when it began serving): a
    #: partition refuses markers from a coordinator older than one it took a marker from
    coordinator_epoch: I32 = 0


@dataclass(frozen=True, slots=True)
class WriteMarkersReply:
    """``errors``: one per partition asked, in order; ``message`` why the whole request was
    refused (then ``errors`` is empty)."""

    error_code: I16
    message: str | None
    errors: tuple[I16, ...]


def decode_request(data: bytes) -> WriteMarkersRequest:
    """Raises ``PostcardError`` (naming the field) or ``ValueError`` (too many partitions)."""
    request: WriteMarkersRequest = postcard.decode(WriteMarkersRequest, data)
    if len(request.partitions) > MAX_MARKER_PARTITIONS:
        raise ValueError(f"partitions: {len(request.partitions)} > {MAX_MARKER_PARTITIONS}")
    return request


def decode_reply(data: bytes, asked: int) -> WriteMarkersReply:
    """Raises ``PostcardError``, or ``ValueError`` if the answer does not cover the ``asked``
    partitions."""
    answer: WriteMarkersReply = postcard.decode(WriteMarkersReply, data)
    if answer.error_code == ErrorCode.none and len(answer.errors) != asked:
        raise ValueError(f"errors: {len(answer.errors)} for {asked} partitions")
    return answer


def code_of(value: int) -> ErrorCode:
    """A peer's error number as Kafka's code (UNKNOWN_SERVER_ERROR if Kafka has none)."""
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.unknown_server_error

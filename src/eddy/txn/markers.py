"""Transaction markers: writing them into the partitions this broker leads, and, in a
cluster, asking the leader of every other partition of a transaction to write them
(``eddy.txn.rpc``, tag 0x07, the mesh's WriteTxnMarkers)."""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import TYPE_CHECKING

from eddy import postcard
from eddy.config_parse import parse_host_port
from eddy.log.partition import PartitionLog
from eddy.mesh.frames import TAG_TXN_MARKERS, Frame
from eddy.postcard import PostcardError
from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.protocol.record_batch import (
    CONTROL_BIT,
    TRANSACTIONAL_BIT,
    ValidatedBatches,
    parse_header,
)
from eddy.protocol.records import build_batch
from eddy.txn.rpc import (
    WriteMarkersReply,
    WriteMarkersRequest,
    code_of,
    decode_reply,
    decode_request,
)

if TYPE_CHECKING:
    from eddy.mesh.service import MeshService
    from eddy.txn.host import MarkerHost

log = logging.getLogger(__name__)

#: how long the coordinator waits for a leader's answer before retrying later
MARKER_TIMEOUT_S = 5.0


def marker_batch(producer_id: int, epoch: int, commit: bool, now: int,
                 coordinator_epoch: int = 0) -> bytearray:
    """A control batch with one record: key (version, type), value (version, coord epoch)."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, max(coordinator_epoch, 0))
    return build_batch([(key, value)], now, producer_id=producer_id, producer_epoch=epoch,
                       attributes=TRANSACTIONAL_BIT | CONTROL_BIT)


def append_own(broker: MarkerHost, plog: PartitionLog, batch: bytearray) -> int:
    """Append a batch the broker built itself (markers included: clients may not)."""
    h = parse_header(batch)
    validated = ValidatedBatches([h], [0], h.record_count, h.max_timestamp, 0)
    result = plog.append(batch, validated, broker.clock.now_ms())
    if broker.replication is not None:
        broker.replication.leader_appended(plog)
    broker.notifier.notify((plog.topic, plog.partition))
    return result.base_offset


async def write_durably(broker: MarkerHost, request: WriteMarkersRequest, topic: str,
                        index: int) -> ErrorCode:
    """``write_one``, then wait as acks=all does: the marker fsynced here (unless write
    caching) and, on a replicated partition, in the ISR. A marker only the leader had
    could be lost to a failover while the coordinator counts the transaction done, leaving
    it open on the new leader (its LSO stuck); the coordinator retries an error instead."""
    code = write_one(broker, request, topic, index)
    plog = broker.logs.partition(topic, index)
    if code != ErrorCode.none or plog is None:
        return code
    end = plog.log_end_offset
    try:
        if not plog.config.write_caching:
            await broker.flusher.flush(plog, end)
    except KafkaError as exc:
        return exc.code
    replication = broker.replication
    if replication is None or plog.sole_replica:
        return ErrorCode.none
    return await replication.wait_replicated(plog, end, 1, MARKER_TIMEOUT_S)


def write_one(broker: MarkerHost, request: WriteMarkersRequest, topic: str, index: int
              ) -> ErrorCode:
    """Write ``request``'s marker into ``topic-index`` if this broker leads it."""
    refused = broker.partition_error(topic, index)
    if refused is not None:
        return refused
    plog = broker.logs.partition(topic, index)
    if plog is None:
        return ErrorCode.unknown_topic_or_partition
    producers = broker.producers.of(plog)
    stale = producers.check_marker(request.producer_id, request.producer_epoch,
                                   request.coordinator_epoch)
    if stale is not None:
        log.warning("marker for %s-%d refused: %s", topic, index, stale[1])
        return stale[0]
    now = broker.clock.now_ms()
    try:
        offset = append_own(broker, plog, marker_batch(
            request.producer_id, request.producer_epoch, request.commit, now,
            request.coordinator_epoch))
    except KafkaError as exc:
        log.warning("marker for %s-%d: %s", topic, index, exc.message)
        return exc.code
    except OSError as exc:
        log.warning("marker for %s-%d: %s", topic, index, exc)
        return ErrorCode.kafka_storage_error
    producers.end_transaction(request.producer_id, request.producer_epoch, now,
                              request.commit, offset, request.coordinator_epoch)
    return ErrorCode.none


class MarkerService:
    """Markers asked of this broker by a coordinator elsewhere, and asked of others."""

    def __init__(self, broker: MarkerHost, mesh: MeshService) -> None:
        self.broker = broker
        self.mesh = mesh

    async def handle(self, peer: bytes, frame: Frame) -> bytes | None:
        """The mesh handler of tag 0x07: only a registered broker may ask."""
        cluster = self.broker.cluster
        if cluster is None or cluster.state.key_owner(peer) is None:
            return postcard.encode(WriteMarkersReply(
                ErrorCode.cluster_authorization_failed, "not a registered broker", ()))
        try:
            request = decode_request(frame.payload)
        except (PostcardError, ValueError) as exc:
            return postcard.encode(WriteMarkersReply(
                ErrorCode.invalid_request, f"bad request: {exc}", ()))
        codes = await asyncio.gather(*(write_durably(self.broker, request, topic, index)
                                       for topic, index in request.partitions))
        errors = tuple(int(code) for code in codes)
        return postcard.encode(WriteMarkersReply(ErrorCode.none, None, errors))

    async def ask(self, leader: int, request: WriteMarkersRequest) -> list[ErrorCode]:
        """``leader``'s answer, an error per partition; a leader that cannot be reached or
        answers nonsense is COORDINATOR_NOT_AVAILABLE for each (retried later)."""
        cluster = self.broker.cluster
        record = None if cluster is None else cluster.state.broker(leader)
        transport = self.mesh.transport
        failed = [ErrorCode.coordinator_not_available] * len(request.partitions)
        if record is None or transport is None:
            return failed
        try:
            key = await transport.connect(parse_host_port(record.mesh_addr, "mesh address"),
                                          record.node_key, timeout_s=MARKER_TIMEOUT_S)
            data = await self.mesh.rpc.call(key, TAG_TXN_MARKERS, postcard.encode(request),
                                            MARKER_TIMEOUT_S)
            answer = decode_reply(data, len(request.partitions))
        except Exception as exc:  # the network, the peer, its bytes: all retried later
            log.info("markers to broker %d: %s", leader, exc)
            return failed
        if answer.error_code != ErrorCode.none:
            log.warning("broker %d refused markers: %s", leader, answer.message)
            return [code_of(answer.error_code)] * len(request.partitions)
        return [code_of(e) for e in answer.errors]

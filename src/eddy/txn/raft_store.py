"""Where a clustered broker's transaction coordinator keeps its state: the ``offsets`` Raft
group (next to the consumer groups it commits offsets to), instead of the local
``__transaction_state``. The coordinator runs where that group's leader is, with the group
coordinator.

Two kinds of records share the group with the ``__consumer_offsets`` ones, under key
versions Kafka's offsets topic never uses (the group coordinator skips them): a
transaction's metadata (key version 0x7FF0 + transactional id, value its JSON) and a
transactional offset commit waiting for its transaction's end (0x7FF1 + producer id +
the offset record's key, value the offset record's value). On commit one entry deletes the
waiting records and writes the offsets; on abort it only deletes them.
"""

from __future__ import annotations

import json
import struct
from collections import defaultdict
from collections.abc import Sequence

from eddy.cluster.offsets import Record, encode_entry
from eddy.cluster.raft.driver import RaftDriver, WriteTimeout
from eddy.cluster.raft.ready import ProposalDropped
from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.txn.coordinator import TxnMetadata

TXN_KEY = struct.pack(">h", 0x7FF0)
PENDING_KEY = struct.pack(">h", 0x7FF1)
_PID = struct.Struct(">q")


def txn_key(txn_id: str) -> bytes:
    return TXN_KEY + txn_id.encode()


def pending_key(producer_id: int, key: bytes) -> bytes:
    return PENDING_KEY + _PID.pack(producer_id) + key


class TxnRaftLog:
    def __init__(self, driver: RaftDriver) -> None:
        self.driver = driver

    async def _propose(self, records: list[Record]) -> None:
        try:
            await self.driver.propose(encode_entry(records))
        except WriteTimeout as exc:
            raise KafkaError(ErrorCode.coordinator_not_available, str(exc)) from None
        except ProposalDropped as exc:  # no longer the leader: clients find the new one
            raise KafkaError(ErrorCode.not_coordinator, str(exc)) from None

    async def persist(self, meta: TxnMetadata) -> None:
        await self._propose([(txn_key(meta.transactional_id),
                              json.dumps(meta.to_json()).encode())])

    async def hold_offsets(self, producer_id: int, records: list[Record]) -> None:
        """Transactional offset commits, kept until their transaction ends."""
        await self._propose([(pending_key(producer_id, k), v) for k, v in records])

    async def settle_offsets(self, producer_id: int, records: list[Record], commit: bool,
                             done: TxnMetadata) -> None:
        """The held commits of ``producer_id`` dropped, and written if ``commit``, with
        the transaction's completed metadata ``done``: one entry."""
        out: list[Record] = [(pending_key(producer_id, k), None) for k, _ in records]
        if commit:
            out += records
        out.append((txn_key(done.transactional_id), json.dumps(done.to_json()).encode()))
        await self._propose(out)


def split(records: Sequence[tuple[bytes, bytes | None]]
          ) -> tuple[dict[str, TxnMetadata], dict[int, list[Record]]]:
    """The transactions and the held offset commits (by producer id) among the offsets
    group's records; a record that does not parse is skipped (the group's entries were
    checked by the leader that wrote them, so this is a bug, not an attack)."""
    txns: dict[str, TxnMetadata] = {}
    held: dict[int, list[Record]] = defaultdict(list)
    for key, value in records:
        if value is None:
            continue
        if key.startswith(TXN_KEY):
            txn_id = key[len(TXN_KEY):].decode(errors="replace")
            try:
                txns[txn_id] = TxnMetadata.from_json(txn_id, json.loads(value))
            except (ValueError, KeyError, TypeError):
                continue
        elif key.startswith(PENDING_KEY) and len(key) > len(PENDING_KEY) + _PID.size:
            (pid,) = _PID.unpack_from(key, len(PENDING_KEY))
            held[pid].append((key[len(PENDING_KEY) + _PID.size:], value))
    return txns, dict(held)

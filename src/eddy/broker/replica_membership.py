"""When a node may delete its copy of a partition it is no longer a replica of.

A reassignment that completes takes nodes out of a partition's replicas; their copies must
go (Kafka's StopReplica with delete). The danger is a node deciding on a stale replica of
the metadata: after a restart it applies the committed log from its last snapshot on, and
for a moment may see an older state in which it was not yet a replica of a partition it
holds data of (added later). Deleting then could throw away an in-sync copy.

So each node remembers, per partition it hosts, the latest partition epoch at which it saw
itself among the replicas (``joined``, kept in ``replica-epochs.json``, written before the
replica fetches or serves anything in that epoch). Partition epochs only grow, and every
change of the replicas bumps it: a state that does not list this node and whose partition
epoch is above the last one it was a member in can only come from a committed removal
after everything this node holds was written. A state at or below it is stale, and nothing
is deleted. A partition with data but no record (data from before this bookkeeping) is
never deleted. The file is written when a hosted partition's epoch moves (a leader or ISR
change: rare, one small write per metadata pass).
"""

from __future__ import annotations

import json
import logging
import os

from eddy.log.state_files import atomic_write
from eddy.metadata.records import PartitionRecord

__all__ = ["MEMBERSHIP_FILE", "ReplicaMembership"]

log = logging.getLogger(__name__)

MEMBERSHIP_FILE = "replica-epochs.json"


class ReplicaMembership:
    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, MEMBERSHIP_FILE)
        #: topic id (hex) -> partition -> the partition epoch this node joined it at
        self.joined: dict[str, dict[int, int]] = self._load()
        self._dirty = False

    def _load(self) -> dict[str, dict[int, int]]:
        try:
            with open(self.path, encoding="utf-8") as f:
                raw = json.load(f)
            return {str(t): {int(p): int(e) for p, e in parts.items()}
                    for t, parts in raw.items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            # unreadable: no partition counts as joined, so nothing is deleted
            log.error("%s unreadable (%s): no partition copy will be deleted", self.path, exc)
            return {}

    def hosting(self, topic_id: str, index: int, part: PartitionRecord) -> None:
        """This node is among ``part``'s replicas (the latest epoch is remembered)."""
        parts = self.joined.setdefault(topic_id, {})
        if parts.get(index, -1) < part.partition_epoch:
            parts[index] = part.partition_epoch
            self._dirty = True

    def removable(self, topic_id: str, index: int, part: PartitionRecord) -> bool:
        """Whether this node, not among ``part``'s replicas, may delete its copy."""
        joined = self.joined.get(topic_id, {}).get(index)
        return joined is not None and part.partition_epoch > joined

    def known(self, topic_id: str, index: int) -> bool:
        return index in self.joined.get(topic_id, {})

    def forget(self, topic_id: str, index: int | None = None) -> None:
        """The copy is gone (``index`` None: every partition of the topic)."""
        parts = self.joined.get(topic_id)
        if parts is None:
            return
        if index is not None:
            parts.pop(index, None)
        if index is None or not parts:
            del self.joined[topic_id]
        self._dirty = True

    def save(self) -> None:
        """Write the file if it changed (raises ``OSError``: the caller must not go on to
        serve what it could not record)."""
        if not self._dirty:
            return
        data = {t: {str(p): e for p, e in sorted(parts.items())}
                for t, parts in sorted(self.joined.items())}
        atomic_write(self.path, json.dumps(data).encode())
        self._dirty = False

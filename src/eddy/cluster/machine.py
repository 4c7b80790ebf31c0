"""``MetadataMachine``: the ``metadata`` group's ``MetadataState`` as the Raft driver's state
machine, telling the node when the state moved.

Every node of a cluster holds a replica: voters and learners apply the same committed
entries in the same order. Listeners run after each applied entry (``on_change``) or
restored snapshot (the state replaced wholesale); they are called on the driver's task, so
they must be quick (schedule work, do not do it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from eddy.metadata import ApplyResult, MetadataState

log = logging.getLogger(__name__)

#: called with the applied index after an entry (or a snapshot) changed the state
ChangeListener = Callable[[int], None]


class MetadataMachine:
    def __init__(self, state: MetadataState | None = None) -> None:
        self.state = state or MetadataState()
        self.applied_index = 0
        self.rejected = 0  # entries the state refused (each changed nothing)
        self._listeners: list[ChangeListener] = []

    def on_change(self, listener: ChangeListener) -> None:
        self._listeners.append(listener)

    def _notify(self) -> None:
        for listener in self._listeners:
            try:
                listener(self.applied_index)
            except Exception:  # a listener's bug must not stop the Raft group
                log.exception("metadata change listener failed")

    def apply(self, index: int, data: bytes) -> ApplyResult:
        result = self.state.apply_bytes(data)
        self.applied_index = index
        if result.ok:
            self._notify()
        else:
            self.rejected += 1
        return result

    def snapshot(self) -> bytes:
        return self.state.snapshot()

    def restore(self, data: bytes) -> None:
        self.state.restore(data)
        self._notify()

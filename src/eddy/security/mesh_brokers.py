"""What a gateway asks of the brokers over the mesh (credentials, ACL decisions): which
brokers to ask, a few live ones at most, in random order."""

from __future__ import annotations

import random
from typing import Protocol

from eddy.mesh.directory import DEAD, Directory

__all__ = ["ASK_TIMEOUT_S", "MAX_ASKED", "BrokerAsker", "Caller"]

#: how long one broker has to answer
ASK_TIMEOUT_S = 2.0
#: brokers asked for one answer at most (the next when one fails)
MAX_ASKED = 3


class Caller(Protocol):
    async def call(self, peer: bytes, tag: int, payload: bytes, timeout_s: float) -> bytes: ...


class BrokerAsker:
    """The live brokers of the mesh directory to ask, a few at most, in random order."""

    def __init__(self, rpc: Caller, directory: Directory, timeout_s: float = ASK_TIMEOUT_S
                 ) -> None:
        self.rpc = rpc
        self.directory = directory
        self.timeout_s = timeout_s

    def brokers(self) -> list[bytes]:
        keys = [key for key, m in self.directory.members.items()
                if m.state != DEAD and "broker" in m.info.roles
                and key != self.directory.local.key]
        random.shuffle(keys)
        return keys[:MAX_ASKED]

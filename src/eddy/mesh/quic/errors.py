"""What the mesh transport's callers and peers see go wrong: the errors its API raises, the
application close and stream reset codes on the wire, and a connection's life-cycle state.

Part of the mesh transport (`eddy.mesh.quic.transport` re-exports the public errors).
"""

from __future__ import annotations

import enum


class MeshError(Exception):
    """A mesh operation failed; the message says why."""


class MeshTimeout(MeshError):
    """No response within the request's timeout (the stream was reset)."""


class PeerUnavailable(MeshError):
    """No usable connection to that peer (never connected, closed, or lost)."""


class PeerRefused(PeerUnavailable):
    """The peer, or we, closed the connection after the handshake (identity, allow-list)."""


class IdentityMismatch(PeerRefused):
    """The node at the dialled address is not the one we expected."""


class _Superseded(MeshError):
    """The peer closed a duplicate connection before reading our request: safe to resend."""


class CloseCode(enum.IntEnum):
    """Application close codes (CONNECTION_CLOSE of type 0x1d)."""

    SHUTDOWN = 0x100
    DUPLICATE = 0x101
    BAD_IDENTITY = 0x102
    NOT_ALLOWED = 0x103
    IDENTITY_MISMATCH = 0x104
    STALE = 0x105
    DIAL_TIMEOUT = 0x106


class StreamCode(enum.IntEnum):
    """RESET_STREAM / STOP_SENDING codes."""

    CANCELLED = 0x10
    TOO_LARGE = 0x11
    REFUSED = 0x12
    NO_RESPONSE = 0x13
    HANDLER_FAILED = 0x14
    OVERLOADED = 0x15


class State(enum.Enum):
    HANDSHAKE = "handshake"  # TLS in progress
    VERIFIED = "verified"  # peer key checked; a client still waits for HANDSHAKE_DONE
    READY = "ready"  # handed to the transport (active, standby or retiring)
    CLOSED = "closed"  # closing, draining or terminated: unusable


"""Size-prefixed frames: a sans-IO decoder fed with bytes, yielding whole frames."""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")


class FrameTooLarge(Exception):
    """The peer announced a frame larger than the configured limit."""


class InvalidFrame(Exception):
    """The peer sent a frame that cannot be a Kafka request."""


class FrameDecoder:
    """Accumulates bytes and splits them into Kafka frames (int32 size + payload)."""

    def __init__(self, max_frame_bytes: int) -> None:
        self._max = max_frame_bytes
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """Add received bytes; return every complete frame payload now available."""
        buf = self._buf
        buf += data
        frames: list[bytes] = []
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0:
                raise InvalidFrame(f"negative frame size {size}")
            if size > self._max:
                raise FrameTooLarge(
                    f"frame of {size} bytes exceeds socket.request.max.bytes={self._max}"
                )
            if end - pos - 4 < size:
                break
            frames.append(bytes(buf[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        if pos:
            del buf[:pos]
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buf)


def frame(payload: bytes) -> bytes:
    """Prefix a payload with its int32 size."""
    return _SIZE.pack(len(payload)) + payload

"""Frames the campaign holds back by default because they hit a known finding that
stalls the whole broker, so a long run can measure everything else (``--no-guard``
sends them; the watchdog then reports the stall).

Known: a CreateTopics or CreatePartitions request asking for millions of partitions
(a num_partitions / count of 0x7fffffff, 0x1000000...) makes `eddy serve` create them one
by one inside its event loop: no other request is served, RSS and the data dir's inode
count grow without bound (seen: 2.9 million partition directories, 1.6 GiB RSS in five
minutes, before it was killed).
"""

from __future__ import annotations

from bench.fuzz.mutate import Mutated
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import MalformedRequest, decode_request, supported_version

MAX_PARTITIONS = 1000  # per topic in one request; real clients in the corpus ask for 1-2
_GUARDED = (int(ApiKey.CREATE_TOPICS), int(ApiKey.CREATE_PARTITIONS))


def held_back(m: Mutated) -> str | None:
    """Why this frame is held back, or None to send it."""
    body = m.frame[4:]
    if m.bad_size or len(body) < 4:
        return None
    key_num = int.from_bytes(body[0:2], "big", signed=True)
    if key_num not in _GUARDED:
        return None
    version = int.from_bytes(body[2:4], "big", signed=True)
    key = supported_version(key_num, version)
    if key is None:
        return None
    try:
        req = decode_request(body, key, version)
    except MalformedRequest:
        return None
    for topic in req.body.topics or ():
        n = getattr(topic, "num_partitions", None)
        if n is None:
            n = getattr(topic, "count", None) or 0
        if n > MAX_PARTITIONS or len(getattr(topic, "assignments", None) or ()) > MAX_PARTITIONS:
            return f"{key.name} asks for {n} partitions"
    return None

"""Announcements are signed by the node they describe; relays cannot forge them."""

from __future__ import annotations

import dataclasses

import pytest

from eddy import postcard
from eddy.mesh.announce import (
    Announcement,
    BadAnnouncement,
    PayloadCache,
    SignedAnnouncement,
    sign,
    verify,
)
from eddy.mesh.identity import NodeIdentity


def announcement(node: bytes, topics: tuple[tuple[str, int], ...] = (("t", 3),)
                 ) -> Announcement:
    return Announcement(node=node, version=7, kafka_node_id=1, roles=("broker",),
                        mesh_addr="127.0.0.1:1", kafka_addr="127.0.0.1:2", rack=None,
                        software="0.1.0", topics=topics, groups=("g",))


def test_a_signed_announcement_verifies_and_a_tampered_one_does_not() -> None:
    me = NodeIdentity.generate()
    ann = announcement(me.node_id)
    signed = postcard.decode(SignedAnnouncement, sign(me, ann))
    assert verify(signed) == ann
    moved = postcard.encode(dataclasses.replace(ann, topics=(("t", 3), ("stolen", 1))))
    with pytest.raises(BadAnnouncement, match="not signed by that node"):
        verify(SignedAnnouncement(body=moved, signature=signed.signature))


def test_a_relay_cannot_announce_for_another_node() -> None:
    victim, relay = NodeIdentity.generate(), NodeIdentity.generate()
    forged = postcard.decode(SignedAnnouncement, sign(relay, announcement(victim.node_id)))
    with pytest.raises(BadAnnouncement):
        verify(forged)
    with pytest.raises(BadAnnouncement, match="64"):
        verify(SignedAnnouncement(body=forged.body, signature=b"x"))
    with pytest.raises(BadAnnouncement):
        verify(SignedAnnouncement(body=b"\xff\xff", signature=bytes(64)))


def test_the_payload_cache_is_bounded_by_bytes() -> None:
    cache = PayloadCache(max_bytes=100)
    digests = [cache.put(bytes([i]) * 40) for i in range(4)]
    assert cache.size <= 100 and len(cache) == 2
    assert cache.get(digests[0]) is None and cache.get(digests[3]) == bytes([3]) * 40
    assert cache.put(b"y" * 101) not in cache  # larger than the whole cache: not kept

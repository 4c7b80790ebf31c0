"""Admission by the cluster key on the mesh transport, in-process on loopback: a token signed
by the cluster key admits, the allow-list still admits, every bad token is refused with
NOT_ALLOWED in both directions, and an admission ends when its token expires."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ed25519

from eddy.mesh.identity import NodeIdentity
from eddy.mesh.membership import OID, MembershipToken, extension, make_token
from eddy.mesh.quic.errors import CloseCode
from eddy.mesh.quic.transport import MeshTransport, PeerRefused


async def _echo(peer: bytes, data: bytes) -> bytes:
    return data


class Node:
    def __init__(self, identity: NodeIdentity | None = None, **kwargs: Any) -> None:
        self.identity = identity or NodeIdentity.generate()
        self.id = self.identity.node_id
        self.ups: list[bytes] = []
        self.t = MeshTransport(self.identity, "127.0.0.1", 0, on_request=_echo,
                               on_message=lambda p, d: None,
                               on_peer_up=lambda p, a: self.ups.append(p),
                               on_peer_down=lambda p: None, **kwargs)
        self.addr: tuple[str, int] = ("", 0)

    async def start(self) -> Node:
        self.addr = await self.t.start()
        return self


def run(coro: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(coro())  # type: ignore[arg-type]


async def wait_until(pred: Callable[[], bool], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not pred():
            await asyncio.sleep(0.01)


def member(cluster: ed25519.Ed25519PrivateKey, expires_at: int = 0, **kwargs: Any) -> Node:
    ident = NodeIdentity.generate()
    return Node(ident, cluster_key=cluster.public_key(),
                membership=make_token(cluster, ident.node_id, expires_at), **kwargs)


def test_members_join_and_non_members_are_refused_both_ways() -> None:
    async def main() -> None:
        cluster = ed25519.Ed25519PrivateKey.generate()
        a = await member(cluster).start()
        b = await member(cluster).start()
        assert await a.t.connect(b.addr) == b.id
        assert await a.t.request(b.id, b"hi", timeout_s=5) == b"hi"
        await wait_until(lambda: a.id in b.t.peers())

        stranger = await Node().start()  # no token
        with pytest.raises(PeerRefused, match="no valid membership token: no membership"):
            await stranger.t.connect(a.addr)  # a refuses it as server
        with pytest.raises(PeerRefused, match="no membership token"):
            await a.t.connect(stranger.addr)  # a refuses it as client

        other_key = ed25519.Ed25519PrivateKey.generate()
        foreign = await member(other_key).start()  # a token from another cluster's key
        with pytest.raises(PeerRefused, match="not signed by the cluster key"):
            await foreign.t.connect(b.addr)

        # a copy of a's token in a certificate of another key
        thief_ident = NodeIdentity.generate()
        assert a.t.membership is not None
        thief = await Node(thief_ident, membership=a.t.membership).start()
        with pytest.raises(PeerRefused, match="membership token is for node"):
            await thief.t.connect(b.addr)

        expired = await member(cluster, int(time.time()) - 1).start()
        with pytest.raises(PeerRefused, match="expired at"):
            await expired.t.connect(b.addr)

        for refused in (stranger, foreign, thief, expired):
            assert refused.id not in a.t.peers() and refused.id not in b.t.peers()
            assert refused.id not in a.ups and refused.id not in b.ups
        assert a.t.peers() == {b.id: b.addr}
        assert await b.t.request(a.id, b"still", timeout_s=5) == b"still"
        for n in (a, b, stranger, foreign, thief, expired):
            await n.t.close()

    run(main)


def test_allow_list_or_token() -> None:
    async def main() -> None:
        cluster = ed25519.Ed25519PrivateKey.generate()
        listed = NodeIdentity.generate()
        a = await member(cluster, allowed=frozenset({listed.node_id})).start()
        friend = await Node(listed).start()  # listed, no token
        assert await friend.t.connect(a.addr) == a.id
        b = await member(cluster).start()  # a token, not listed
        assert await b.t.connect(a.addr) == a.id
        stranger = await Node().start()
        with pytest.raises(PeerRefused, match="not in the allow-list and has no valid"):
            await stranger.t.connect(a.addr)
        for n in (a, friend, b, stranger):
            await n.t.close()

    run(main)


@pytest.mark.parametrize("value", [b"", b"\x04\x69" + bytes(105), b"\x04\x10" + bytes(16),
                                   b"\x04\x69" + bytes(200)])
def test_malformed_token_extensions_are_refused(value: bytes) -> None:
    async def main() -> None:
        cluster = ed25519.Ed25519PrivateKey.generate()
        a = await member(cluster).start()
        evil = Node()
        cert = evil.identity.certificate(x509.UnrecognizedExtension(OID, value))
        evil.t._client_config.certificate = cert
        await evil.start()
        with pytest.raises(PeerRefused, match="no valid membership token"):
            await evil.t.connect(a.addr)
        assert a.t.peers() == {}
        for n in (a, evil):
            await n.t.close()

    run(main)


def test_admission_ends_when_the_token_expires() -> None:
    async def main() -> None:
        cluster = ed25519.Ed25519PrivateKey.generate()
        a = await member(cluster, idle_timeout_s=0.3).start()
        b = await member(cluster, int(time.time()) + 2, idle_timeout_s=0.3).start()
        assert await b.t.connect(a.addr) == a.id
        conn = a.t._active[b.id]
        assert conn.admitted_until is not None
        await wait_until(lambda: b.id not in a.t.peers() and a.id not in b.t.peers())
        assert conn.close_code == CloseCode.NOT_ALLOWED
        for n in (a, b):
            await n.t.close()

    run(main)


def test_a_token_is_not_needed_without_the_cluster_key() -> None:
    async def main() -> None:
        a = await Node().start()
        token: MembershipToken = make_token(ed25519.Ed25519PrivateKey.generate(),
                                            NodeIdentity.generate().node_id)
        b = await Node(membership=token).start()  # someone else's token: nobody checks
        assert await b.t.connect(a.addr) == a.id
        assert extension(token).oid == OID
        for n in (a, b):
            await n.t.close()

    run(main)

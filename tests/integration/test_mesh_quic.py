"""The mesh QUIC transport, in-process on loopback: identity checks, streams, duplicates."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aioquic.asyncio import connect as aioquic_connect
from aioquic.quic.configuration import QuicConfiguration

from eddy.mesh.identity import NodeIdentity
from eddy.mesh.quic.transport import (
    ALPN,
    IdentityMismatch,
    MeshError,
    MeshTimeout,
    MeshTransport,
    PeerRefused,
    PeerUnavailable,
)

Handler = Callable[[bytes, bytes], Awaitable[bytes | None]]


async def _echo(peer: bytes, data: bytes) -> bytes:
    return data


class Node:
    """A transport plus what its callbacks saw."""

    def __init__(self, *, on_request: Handler = _echo, identity: NodeIdentity | None = None,
                 port: int = 0, **kwargs: Any) -> None:
        self.identity = identity or NodeIdentity.generate()
        self.id = self.identity.node_id
        self.messages: list[tuple[bytes, bytes]] = []
        self.ups: list[tuple[bytes, tuple[str, int]]] = []
        self.downs: list[bytes] = []
        self.t = MeshTransport(
            self.identity, "127.0.0.1", port, on_request=on_request,
            on_message=lambda p, d: self.messages.append((p, d)),
            on_peer_up=lambda p, a: self.ups.append((p, a)),
            on_peer_down=self.downs.append, **kwargs,
        )
        self.addr: tuple[str, int] = ("", 0)

    async def start(self) -> Node:
        self.addr = await self.t.start()
        return self


async def wait_until(pred: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not pred():
            await asyncio.sleep(0.01)


def run(coro: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(coro())  # type: ignore[arg-type]


async def _pair(**kwargs: Any) -> tuple[Node, Node]:
    a = await Node(**kwargs).start()
    b = await Node(**kwargs).start()
    assert await a.t.connect(b.addr) == b.id
    await wait_until(lambda: a.id in b.t.peers())
    return a, b


def test_handshake_verifies_both_sides() -> None:
    async def main() -> None:
        a, b = await _pair()
        assert a.t.peers() == {b.id: b.addr}
        assert b.t.peers() == {a.id: a.addr}  # one socket: the dialler's address is its listener
        assert a.ups == [(b.id, b.addr)] and b.ups == [(a.id, a.addr)]
        # dialling the same address again, or the other way round, reuses the connection
        assert await a.t.connect(b.addr, expected=b.id) == b.id
        assert await b.t.connect(a.addr) == a.id
        assert a.t.connection_count(b.id) == 1 and b.t.connection_count(a.id) == 1
        with pytest.raises(IdentityMismatch):
            await a.t.connect(b.addr, expected=a.id)
        await a.t.close()
        await b.t.close()

    run(main)


def test_request_round_trips_both_ways_including_1_mib() -> None:
    async def main() -> None:
        seen: list[bytes] = []

        async def handler(peer: bytes, data: bytes) -> bytes:
            seen.append(peer)
            return b"re:" + data

        a, b = await _pair(on_request=handler)
        assert await a.t.request(b.id, b"ping", timeout_s=5) == b"re:ping"
        assert await b.t.request(a.id, b"pong", timeout_s=5) == b"re:pong"
        assert seen == [a.id, b.id]
        big = os.urandom(1 << 20)
        assert await a.t.request(b.id, big, timeout_s=20) == b"re:" + big
        assert await a.t.request(b.id, b"", timeout_s=5) == b"re:"
        with pytest.raises(PeerUnavailable):
            await a.t.request(NodeIdentity.generate().node_id, b"x", timeout_s=1)
        await a.t.close()
        await b.t.close()

    run(main)


def test_200_concurrent_requests() -> None:
    async def main() -> None:
        async def slowish(peer: bytes, data: bytes) -> bytes:
            await asyncio.sleep(0.001)
            return data[::-1]

        a, b = await _pair(on_request=slowish)
        payloads = [f"request-{i}".encode() * (1 + i % 7) for i in range(200)]
        answers = await asyncio.gather(*(a.t.request(b.id, p, timeout_s=20) for p in payloads))
        assert answers == [p[::-1] for p in payloads]
        await a.t.close()
        await b.t.close()

    run(main)


def test_concurrent_incoming_requests_are_bounded_per_peer() -> None:
    async def main() -> None:
        running = 0
        most = 0
        release = asyncio.Event()

        async def handler(peer: bytes, data: bytes) -> bytes:
            nonlocal running, most
            running += 1
            most = max(most, running)
            await release.wait()
            running -= 1
            return data

        a = await Node().start()
        b = await Node(on_request=handler, max_inflight_requests_per_peer=3).start()
        await a.t.connect(b.addr)
        tasks = [asyncio.create_task(a.t.request(b.id, b"%d" % i, timeout_s=10))
                 for i in range(10)]
        await wait_until(lambda: running == 3)
        await asyncio.sleep(0.1)
        assert running == 3
        release.set()
        assert await asyncio.gather(*tasks) == [b"%d" % i for i in range(10)]
        assert most == 3
        await a.t.close()
        await b.t.close()

    run(main)


def test_timeout_and_cancellation_reset_the_stream_at_the_peer() -> None:
    async def main() -> None:
        started = asyncio.Event()
        cancelled: list[bytes] = []

        async def stuck(peer: bytes, data: bytes) -> bytes:
            started.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.append(data)
                raise
            return b"never"

        a, b = await _pair(on_request=stuck)
        with pytest.raises(MeshTimeout):
            await a.t.request(b.id, b"timed-out", timeout_s=0.2)
        await wait_until(lambda: cancelled == [b"timed-out"])

        started.clear()
        task = asyncio.create_task(a.t.request(b.id, b"cancelled", timeout_s=60))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await wait_until(lambda: cancelled == [b"timed-out", b"cancelled"])
        assert a.t.peers() == {b.id: b.addr}  # the connection is unaffected
        await a.t.close()
        await b.t.close()

    run(main)


def test_handler_returning_none_resets_the_stream() -> None:
    async def main() -> None:
        async def nothing(peer: bytes, data: bytes) -> bytes | None:
            if data == b"boom":
                raise RuntimeError("handler bug")
            return None

        a, b = await _pair(on_request=nothing)
        with pytest.raises(MeshError, match="reset"):
            await a.t.request(b.id, b"x", timeout_s=5)
        with pytest.raises(MeshError, match="reset"):
            await a.t.request(b.id, b"boom", timeout_s=5)
        assert a.t.peers() == {b.id: b.addr}
        await a.t.close()
        await b.t.close()

    run(main)


def test_simultaneous_dial_keeps_exactly_one_connection() -> None:
    async def main() -> None:
        for _ in range(15):
            a = await Node().start()
            b = await Node().start()
            got = await asyncio.gather(a.t.connect(b.addr), b.t.connect(a.addr))
            assert got == [b.id, a.id]
            await wait_until(lambda a=a, b=b: a.t.connection_count(b.id) == 1
                             and b.t.connection_count(a.id) == 1)
            small, big = (a, b) if a.id < b.id else (b, a)
            # the survivor is the connection the smaller node initiated, on both sides
            assert small.t._active[big.id].is_client
            assert not big.t._active[small.id].is_client
            assert await a.t.request(b.id, b"ab", timeout_s=5) == b"ab"
            assert await b.t.request(a.id, b"ba", timeout_s=5) == b"ba"
            assert a.ups == [(b.id, b.addr)] and b.ups == [(a.id, a.addr)]
            assert a.downs == [] and b.downs == []
            await a.t.close()
            await b.t.close()

    run(main)


def test_requests_during_simultaneous_dial_all_succeed() -> None:
    async def main() -> None:
        for _ in range(5):
            a = await Node().start()
            b = await Node().start()

            async def dial_and_use(x: Node, y: Node) -> list[bytes]:
                peer = await x.t.connect(y.addr)
                return await asyncio.gather(
                    *(x.t.request(peer, b"%d" % i, timeout_s=10) for i in range(20)))

            r1, r2 = await asyncio.gather(dial_and_use(a, b), dial_and_use(b, a))
            assert r1 == r2 == [b"%d" % i for i in range(20)]
            await wait_until(lambda a=a, b=b: a.t.connection_count(b.id) == 1
                             and b.t.connection_count(a.id) == 1)
            await a.t.close()
            await b.t.close()

    run(main)


def test_restarted_peer_with_another_key_is_refused() -> None:
    async def main() -> None:
        a = await Node().start()
        b1 = await Node().start()
        assert await a.t.connect(b1.addr, expected=b1.id) == b1.id
        await b1.t.close()
        await wait_until(lambda: a.downs == [b1.id])
        b2 = await Node(port=b1.addr[1]).start()
        assert b2.addr == b1.addr and b2.id != b1.id
        with pytest.raises(IdentityMismatch):
            await a.t.connect(b1.addr, expected=b1.id)
        assert a.t.peers() == {}
        await asyncio.sleep(0.2)
        assert b2.t.peers() == {} and b2.ups == []
        # without an expectation the new node is accepted (that is how seeds are dialled)
        assert await a.t.connect(b1.addr) == b2.id
        await a.t.close()
        await b2.t.close()

    run(main)


def test_restarted_peer_with_same_key_replaces_the_dead_connection() -> None:
    async def main() -> None:
        ident = NodeIdentity.generate()
        b = await Node(identity=ident).start()
        a = await Node(identity=NodeIdentity.generate()).start()
        small, big = (a, b) if a.id < b.id else (b, a)
        # the smaller node dials, so its (soon dead) connection is the preferred one
        await small.t.connect(big.addr)
        port = big.addr[1]
        big.t.abort()  # crash: no CONNECTION_CLOSE
        await big.t.wait_closed()  # the port is free again
        big2 = await Node(identity=big.identity, port=port).start()
        assert await big2.t.connect(small.addr) == small.id
        await wait_until(lambda: big2.id in small.t.peers()
                         and small.t._active[big2.id].usable()
                         and not small.t._active[big2.id].is_client)
        assert await small.t.request(big2.id, b"hi", timeout_s=5) == b"hi"
        assert await big2.t.request(small.id, b"yo", timeout_s=5) == b"yo"
        await small.t.close()
        await big2.t.close()

    run(main)


def test_allow_list_refuses_unlisted_nodes_in_both_directions() -> None:
    async def main() -> None:
        friend = NodeIdentity.generate()
        a = await Node(allowed=frozenset({friend.node_id})).start()
        b = await Node().start()
        with pytest.raises(PeerRefused, match="allow-list"):
            await b.t.connect(a.addr)  # a refuses b as server
        with pytest.raises(PeerRefused, match="allow-list"):
            await a.t.connect(b.addr)  # a refuses b as client
        await asyncio.sleep(0.2)
        assert a.t.peers() == {} and b.t.peers() == {}
        assert a.ups == [] and b.ups == []
        f = await Node(identity=friend).start()
        assert await f.t.connect(a.addr) == a.id
        assert await f.t.request(a.id, b"ok", timeout_s=5) == b"ok"
        for n in (a, b, f):
            await n.t.close()

    run(main)


def test_client_without_certificate_is_refused() -> None:
    async def main() -> None:
        a = await Node().start()
        config = QuicConfiguration(alpn_protocols=[ALPN], is_client=True,
                                   verify_mode=ssl.CERT_NONE)
        async with aioquic_connect("127.0.0.1", a.addr[1], configuration=config) as client:
            async with asyncio.timeout(5):
                await client.wait_closed()
            close = client._quic._close_event
            assert close is not None and "no certificate" in close.reason_phrase
        assert a.t.peers() == {} and a.ups == []
        # and a proper node still gets in
        b = await Node().start()
        assert await b.t.connect(a.addr) == a.id
        await a.t.close()
        await b.t.close()

    run(main)


def test_oversized_stream_is_reset_and_the_connection_keeps_working() -> None:
    async def main() -> None:
        a = await Node().start()
        b = await Node(max_stream_bytes=64 * 1024).start()
        await a.t.connect(b.addr)
        with pytest.raises(MeshError):
            await a.t.request(b.id, b"x" * 200_000, timeout_s=5)
        a.t.send(b.id, b"y" * 200_000)  # an oversized message is dropped the same way
        assert await a.t.request(b.id, b"small", timeout_s=5) == b"small"
        a.t.send(b.id, b"fits")
        await wait_until(lambda: b.messages == [(a.id, b"fits")])
        # a response over the requester's own limit fails that request only
        with pytest.raises(MeshError, match="response exceeds max_stream_bytes"):
            await b.t.request(a.id, b"z" * 100_000, timeout_s=5)
        assert await b.t.request(a.id, b"z" * 1000, timeout_s=5) == b"z" * 1000
        assert a.t.peers() == {b.id: b.addr} and b.t.peers() == {a.id: a.addr}
        await a.t.close()
        await b.t.close()

    run(main)


def test_bytes_buffered_per_connection_are_bounded() -> None:
    async def main() -> None:
        release = asyncio.Event()

        async def held(peer: bytes, data: bytes) -> bytes:
            await release.wait()
            return b"done"

        a = await Node().start()
        b = await Node(on_request=held, max_connection_buffer=150_000).start()
        await a.t.connect(b.addr)
        tasks = [asyncio.create_task(a.t.request(b.id, bytes([i]) * 60_000, timeout_s=10))
                 for i in range(4)]
        await wait_until(lambda: sum(t.done() for t in tasks) >= 2)
        release.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert results.count(b"done") == 2  # 2 x 60 kB fit in 150 kB, a third does not
        assert all(isinstance(r, MeshError) for r in results if r != b"done")
        assert await a.t.request(b.id, b"after", timeout_s=5) == b"done"
        await a.t.close()
        await b.t.close()

    run(main)


def test_send_queue_is_bounded() -> None:
    async def main() -> None:
        a = await Node(max_send_queue_bytes=256 * 1024).start()
        b = await Node().start()
        await a.t.connect(b.addr)
        with pytest.raises(MeshError, match="send queue full"):
            await a.t.request(b.id, b"q" * 300_000, timeout_s=5)
        with pytest.raises(MeshError, match="send queue full"):
            a.t.send(b.id, b"q" * 300_000)
        assert await a.t.request(b.id, b"q" * 100_000, timeout_s=5) == b"q" * 100_000
        await a.t.close()
        await b.t.close()

    run(main)


def test_uni_messages_and_datagrams_are_delivered() -> None:
    async def main() -> None:
        a, b = await _pair()
        big = os.urandom(300_000)
        a.t.send(b.id, b"one")
        a.t.send(b.id, big)
        b.t.send(a.id, b"back")
        await wait_until(lambda: len(b.messages) == 2 and len(a.messages) == 1)
        assert sorted(b.messages) == sorted([(a.id, b"one"), (a.id, big)])
        assert a.messages == [(b.id, b"back")]
        b.messages.clear()
        # datagrams are best effort: resend until one lands (loopback rarely drops)
        async with asyncio.timeout(5):
            while not b.messages:
                assert a.t.send_datagram(b.id, b"d" * 1000)
                await asyncio.sleep(0.05)
        assert b.messages[0] == (a.id, b"d" * 1000)
        assert not a.t.send_datagram(b.id, b"d" * 5000)  # larger than a packet
        assert not a.t.send_datagram(NodeIdentity.generate().node_id, b"d")
        await a.t.close()
        await b.t.close()

    run(main)


def test_peer_shutdown_and_silent_death_call_on_peer_down() -> None:
    async def main() -> None:
        a, b = await _pair(idle_timeout_s=1.0)
        await b.t.close()  # graceful: CONNECTION_CLOSE
        await wait_until(lambda: a.downs == [b.id], timeout=2.0)
        assert a.t.peers() == {}
        c = await Node(idle_timeout_s=1.0).start()
        await a.t.connect(c.addr)
        c.t.abort()  # silent: only the idle timeout can tell
        await wait_until(lambda: a.downs == [b.id, c.id], timeout=5.0)
        with pytest.raises(PeerUnavailable):
            await a.t.request(c.id, b"x", timeout_s=1)
        await a.t.close()

    run(main)


def test_keepalive_keeps_an_idle_connection_up() -> None:
    async def main() -> None:
        a, b = await _pair(idle_timeout_s=0.5)
        await asyncio.sleep(1.5)  # three idle timeouts without traffic
        assert a.downs == [] and b.downs == []
        assert await a.t.request(b.id, b"still", timeout_s=5) == b"still"
        await a.t.close()
        await b.t.close()

    run(main)


def test_garbage_datagrams_do_not_disturb_connections() -> None:
    async def main() -> None:
        a, b = await _pair()
        cid = next(iter(b.t._by_cid))
        junk = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            for i in range(300):
                junk.sendto(os.urandom(i % 1400 + 1), b.addr)
                # long-header Initial-looking junk big enough to start a handshake
                junk.sendto(b"\xc3\x00\x00\x00\x01\x08" + os.urandom(1300), b.addr)
                # short-header packets aimed at the live connection's id, bad crypto
                junk.sendto(bytes([0x40 | (i & 3)]) + cid + os.urandom(60), b.addr)
                if i % 50 == 0:
                    await asyncio.sleep(0)
        finally:
            junk.close()
        assert await a.t.request(b.id, b"fine", timeout_s=5) == b"fine"
        assert await b.t.request(a.id, b"fine", timeout_s=5) == b"fine"
        assert a.t.peers() == {b.id: b.addr} and b.t.peers() == {a.id: a.addr}
        assert b.downs == [] and a.downs == []
        await a.t.close()
        await b.t.close()

    run(main)

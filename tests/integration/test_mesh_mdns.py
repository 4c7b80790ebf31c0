"""mDNS discovery of mesh peers (eddy.mesh.mdns), on the loopback interface only.

Each test uses its own random service type, so parallel runs on the same host do not see each
other. The checks of what a peer publishes are also driven directly (parse_service is pure).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import subprocess
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from zeroconf import IPVersion
from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

from eddy.mesh.identity import to_base32
from eddy.mesh.mdns import (
    MAX_KNOWN,
    MdnsDiscovery,
    MdnsPeer,
    MdnsRecordError,
    instance_name,
    parse_service,
)

# mDNS's one multicast port on this host: not beside the other mDNS tests (scripts/test runs
# the suite in parallel)
pytestmark = pytest.mark.xdist_group("mdns")

LOOPBACK = ["127.0.0.1"]
WAIT_S = 10.0
LO = bytes([127, 0, 0, 1])


def _run(coro: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(coro())


async def wait_until(pred: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    try:
        async with asyncio.timeout(timeout):
            while not pred():
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"not within {timeout} s: {what}") from None


def _service_type() -> str:
    return f"_e{secrets.token_hex(4)}._udp.local."


def _multicast_on_lo_works() -> bool:
    group, port = "224.0.0.251", 0
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.bind(("0.0.0.0", port))
        port = rx.getsockname()[1]
        rx.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                      socket.inet_aton(group) + socket.inet_aton("127.0.0.1"))
        tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
        tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
        token = secrets.token_bytes(8)
        tx.sendto(token, (group, port))
        rx.settimeout(1.0)
        while True:
            data, _ = rx.recvfrom(64)
            if data == token:
                return True
    except OSError:
        return False
    finally:
        rx.close()
        tx.close()


@pytest.fixture(scope="module", autouse=True)
def multicast_on_loopback() -> None:
    """mDNS needs multicast on lo. It works here as is (IP_MULTICAST_IF=127.0.0.1); where it
    does not and we are root, `ip link set lo multicast on` is the fix."""
    if _multicast_on_lo_works():
        return
    if os.geteuid() == 0:
        subprocess.run(["ip", "link", "set", "lo", "multicast", "on"], check=False)
    assert _multicast_on_lo_works(), "multicast on lo does not work (ip link show lo)"


def _key() -> bytes:
    return secrets.token_bytes(32)


class Found:
    def __init__(self) -> None:
        self.calls: list[tuple[bytes, str]] = []

    def __call__(self, key: bytes, addr: str) -> None:
        self.calls.append((key, addr))

    def keys(self) -> set[bytes]:
        return {k for k, _ in self.calls}


# ---- the pure checks ----------------------------------------------------------------------------

ST = "_eddy-mesh._udp.local."


def _props(node_key: bytes, /, **over: bytes | None) -> dict[bytes, bytes | None]:
    """A TXT record as zeroconf hands it over; a None in ``over`` removes that entry."""
    props: dict[bytes, bytes | None] = {b"key": node_key.hex().encode(), b"node": b"7",
                                        b"ver": b"0.1.0"}
    for k, v in over.items():
        props[k.encode()] = v
    return {k: v for k, v in props.items() if v is not None}


def test_a_good_service_parses() -> None:
    key = _key()
    peer = parse_service(instance_name(key, ST), ST, _props(key, cluster=b"blue"), 100, 4433,
                         [bytes(16), LO])
    assert peer == MdnsPeer(key=key, addr="127.0.0.1:4433", kafka_node_id=7, version="0.1.0",
                            cluster="blue")
    v6 = bytes.fromhex("fd000000000000000000000000000002")
    peer6 = parse_service(instance_name(key, ST).upper(), ST, _props(key), 100, 1, [v6])
    assert peer6.addr == "[fd00::2]:1"
    assert peer6.cluster == ""


KEY = bytes(range(32))
NAME = instance_name(KEY, ST)
BAD: list[tuple[str, str, dict[bytes, bytes | None], int, int | None, list[bytes]]] = [
    ("name", "x" * 300, _props(KEY), 10, 1, [LO]),
    ("name", "not-a-node." + ST, _props(KEY), 10, 1, [LO]),
    ("name", NAME.replace(ST, "_other._udp.local."), _props(KEY), 10, 1, [LO]),
    ("name", "a" * 51 + "b." + ST, _props(KEY), 10, 1, [LO]),  # not canonical base32
    ("txt", NAME, _props(KEY), 5000, 1, [LO]),
    ("txt", NAME, {bytes([i]): b"" for i in range(40)}, 10, 1, [LO]),
    ("txt.key", NAME, {b"node": b"1", b"ver": b"1"}, 10, 1, [LO]),
    ("txt.key", NAME, _props(KEY, key=b"z" * 64), 10, 1, [LO]),
    ("txt.key", NAME, _props(KEY, key=KEY.hex().encode()[:-2]), 10, 1, [LO]),
    ("txt.key", NAME, _props(KEY, key=bytes(32).hex().encode()), 10, 1, [LO]),
    ("txt.key", NAME, _props(KEY, key=b"a" * 10_000), 10, 1, [LO]),
    ("txt.node", NAME, _props(KEY, node=b"-1"), 10, 1, [LO]),
    ("txt.node", NAME, _props(KEY, node=b"2147483648"), 10, 1, [LO]),
    ("txt.node", NAME, _props(KEY, node=None), 10, 1, [LO]),
    ("txt.ver", NAME, _props(KEY, ver="é".encode()), 10, 1, [LO]),
    ("txt.ver", NAME, _props(KEY, ver=b"a\nb"), 10, 1, [LO]),
    ("txt.cluster", NAME, _props(KEY, cluster=b"c" * 64), 10, 1, [LO]),
    ("port", NAME, _props(KEY), 10, 0, [LO]),
    ("port", NAME, _props(KEY), 10, 70000, [LO]),
    ("port", NAME, _props(KEY), 10, None, [LO]),
    ("address", NAME, _props(KEY), 10, 1, []),
    ("address", NAME, _props(KEY), 10, 1, [bytes(4), bytes([224, 0, 0, 251]), b"\x01\x02"]),
    ("address", NAME, _props(KEY), 10, 1, [bytes.fromhex("fe80" + "00" * 13 + "01")]),
    ("address", NAME, _props(KEY), 10, 1, [b"\xff" * 4]),
]


@pytest.mark.parametrize(("field", "name", "props", "text_len", "port", "addrs"), BAD)
def test_hostile_services_name_the_bad_field(
        field: str, name: str, props: dict[bytes, bytes | None], text_len: int,
        port: int | None, addrs: list[bytes]) -> None:
    with pytest.raises(MdnsRecordError) as info:
        parse_service(name, ST, props, text_len, port, addrs)
    assert info.value.field == field


@settings(max_examples=300, deadline=None)
@given(name=st.one_of(st.text(max_size=80), st.just(NAME)),
       props=st.dictionaries(st.sampled_from([b"key", b"node", b"ver", b"cluster", b"x"]),
                             st.one_of(st.none(), st.binary(max_size=80),
                                       st.just(KEY.hex().encode())), max_size=5),
       port=st.one_of(st.none(), st.integers(-10, 70_000)),
       addrs=st.lists(st.binary(max_size=17), max_size=20))
def test_arbitrary_services_parse_or_raise_mdns_record_error(
        name: str, props: dict[bytes, bytes | None], port: int | None,
        addrs: list[bytes]) -> None:
    try:
        peer = parse_service(name, ST, props, 10, port, addrs)
    except MdnsRecordError:
        return
    assert peer.key == KEY
    assert peer.addr.endswith(f":{port}")


def test_known_peers_are_bounded() -> None:
    found = Found()
    d = MdnsDiscovery(_key(), ("127.0.0.1", 1), 1, found, interfaces=LOOPBACK)
    keys = [_key() for _ in range(MAX_KNOWN + 50)]
    for i, key in enumerate(keys):
        peer = MdnsPeer(key=key, addr=f"127.0.0.1:{i + 1}", kafka_node_id=i, version="1",
                        cluster="")
        d._consider(peer, instance_name(key, ST))
    assert len(found.calls) == len(keys)
    assert len(d.known_peers()) == MAX_KNOWN
    assert set(d.known_peers()) == set(keys[-MAX_KNOWN:])


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="node key"):
        MdnsDiscovery(b"short", ("127.0.0.1", 1), 1, Found())
    with pytest.raises(ValueError, match="cluster"):
        MdnsDiscovery(_key(), ("127.0.0.1", 1), 1, Found(), cluster="x" * 64)
    with pytest.raises(ValueError, match="port"):
        MdnsDiscovery(_key(), ("127.0.0.1", 0), 1, Found())


# ---- over mDNS on lo ----------------------------------------------------------------------------


def test_nodes_find_each_other_and_ignore_another_cluster() -> None:
    async def main() -> None:
        stype = _service_type()
        made = [(_key(), Found(), port, cluster)
                for port, cluster in ((4001, "blue"), (4002, "blue"), (4003, "green"))]
        nodes = [MdnsDiscovery(key, ("127.0.0.1", port), i, found, service_type=stype,
                               interfaces=LOOPBACK, cluster=cluster)
                 for i, (key, found, port, cluster) in enumerate(made)]
        (ka, fa, _, _), (kb, fb, _, _), (_, fc, _, _) = made
        a, b, c = nodes
        try:
            await asyncio.gather(*(n.start() for n in nodes))
            await wait_until(lambda: fa.keys() == {kb} and fb.keys() == {ka}, "a and b meet")
            await wait_until(lambda: a.counts["other_cluster"] >= 1
                             and b.counts["other_cluster"] >= 1
                             and c.counts["other_cluster"] >= 2, "green seen and ignored")
            assert fa.calls == [(kb, "127.0.0.1:4002")]
            assert fb.calls == [(ka, "127.0.0.1:4001")]
            assert fc.calls == []
            assert a.known_peers() == {kb: "127.0.0.1:4002"}
            assert a.counts["bad"] == b.counts["bad"] == 0
        finally:
            await asyncio.gather(*(n.close() for n in nodes))

    _run(main)


def _raw_info(stype: str, name: str, props: dict[str, str], addr: str = "127.0.0.1",
              port: int = 5000) -> AsyncServiceInfo:
    host = f"h{secrets.token_hex(6)}.local."
    return AsyncServiceInfo(stype, name, port=port, properties=props, server=host,
                            parsed_addresses=[addr])


def test_malformed_services_are_ignored_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="eddy.mesh.mdns")

    async def main() -> None:
        stype = _service_type()
        good_key, k1, k2, k3 = _key(), _key(), _key(), _key()

        def name(key: bytes) -> str:
            return instance_name(key, stype)

        def txt(node_key: bytes, /, **over: str) -> dict[str, str]:
            return {"key": node_key.hex(), "node": "3", "ver": "0.1", **over}

        bad = [
            _raw_info(stype, f"not-a-node.{stype}", txt(k1)),
            _raw_info(stype, name(k1), txt(k1, key="z" * 64)),
            _raw_info(stype, name(k2), txt(k3)),  # the key of someone else
            _raw_info(stype, name(k3), txt(k3, node="many")),
            _raw_info(stype, name(_key()), txt(k1, cluster="c" * 100)),
            _raw_info(stype, name(_key()), {"node": "1", "ver": "1"}),
            _raw_info(stype, f"{to_base32(_key())}x.{stype}", txt(k1)),
        ]
        zc = AsyncZeroconf(interfaces=LOOPBACK, ip_version=IPVersion.V4Only)
        found = Found()
        d = MdnsDiscovery(_key(), ("127.0.0.1", 4100), 9, found, service_type=stype,
                          interfaces=LOOPBACK)
        try:
            await asyncio.gather(d.start(), *(zc.async_register_service(i) for i in bad))
            await wait_until(lambda: d.counts["bad"] >= len(bad), "every bad service seen")
            good = _raw_info(stype, name(good_key), txt(good_key), port=5001)
            await zc.async_register_service(good)
            await wait_until(lambda: bool(found.calls), "a good service after bad ones")
            assert found.calls == [(good_key, "127.0.0.1:5001")]
            # a bad service that changes is checked again but not logged again
            seen = d.counts["bad"]
            changed = _raw_info(stype, bad[1].name, txt(k1, key="y" * 64))
            changed.server = bad[1].server
            await (await zc.async_update_service(changed))
            await wait_until(lambda: d.counts["bad"] > seen, "the changed bad service re-checked")
        finally:
            await d.close()
            await zc.async_close()
        warnings = [r for r in caplog.records
                    if r.name == "eddy.mesh.mdns" and r.levelno == logging.WARNING]
        for info in bad:
            mentions = [r for r in warnings if info.name in r.getMessage()]
            assert len(mentions) == 1, (info.name, [r.getMessage() for r in warnings])
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert found.keys() == {good_key}

    _run(main)


def test_a_peer_that_leaves_and_returns_is_reported_again() -> None:
    async def main() -> None:
        stype = _service_type()
        fa, fb = Found(), Found()
        ka, kb = _key(), _key()
        a = MdnsDiscovery(ka, ("127.0.0.1", 4201), 1, fa, service_type=stype,
                          interfaces=LOOPBACK)
        b = MdnsDiscovery(kb, ("127.0.0.1", 4202), 2, fb, service_type=stype,
                          interfaces=LOOPBACK)
        b2 = MdnsDiscovery(kb, ("127.0.0.1", 4203), 2, fb, service_type=stype,
                           interfaces=LOOPBACK)
        try:
            await asyncio.gather(a.start(), b.start())
            await wait_until(lambda: fa.keys() == {kb}, "a finds b")
            await b.close()
            await wait_until(lambda: kb not in a.known_peers(), "a sees b leave")
            await b2.start()
            await wait_until(lambda: len(fa.calls) == 2, "a finds b again")
            assert fa.calls == [(kb, "127.0.0.1:4202"), (kb, "127.0.0.1:4203")]
        finally:
            await asyncio.gather(a.close(), b.close(), b2.close())

    _run(main)

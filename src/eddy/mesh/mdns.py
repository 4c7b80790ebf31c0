"""Finding mesh peers on a LAN by mDNS / DNS-SD (seed 000), opt-in by `mesh.mdns.enable`.

Every node registers one service `<base32 NodeId>.<service type>` (default
`_eddy-mesh._udp.local.`) whose SRV record carries its mesh port, whose A/AAAA records carry its
mesh addresses and whose TXT record carries:

    key=<64 hex digits of the NodeId>  node=<kafka node id>  ver=<eddy version>
    [cluster=<cluster name>]

and browses for the same type. Each service found (not our own, same cluster name) is resolved
and reported once as `on_found(node_key, "host:port")`; the caller dials that address as a seed,
expecting that key (the QUIC handshake proves it, mDNS proves nothing).

Everything heard on the LAN is hostile: `parse_service` (pure, no I/O) checks every field against
bounds before using it and raises `MdnsRecordError` naming the field; a bad service is logged once
and ignored. Memory stays bounded: at most `MAX_KNOWN` peers remembered (least recently seen
forgotten first), `MAX_PENDING` services waiting to be resolved (more are dropped, counted),
`MAX_LOGGED` names remembered for log-once.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import ipaddress
import logging
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from zeroconf import (
    InterfaceChoice,
    IPVersion,
    ServiceStateChange,
    Zeroconf,
)
from zeroconf._utils.net import get_all_addresses  # not in zeroconf.__all__
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

from eddy import __version__
from eddy.mesh.identity import BASE32_LEN, HEX_LEN, NODE_ID_LEN, short, to_base32

log = logging.getLogger(__name__)

DEFAULT_SERVICE_TYPE = "_eddy-mesh._udp.local."
#: peers remembered (key -> address); the least recently seen is forgotten beyond it
MAX_KNOWN = 256
#: services waiting to be resolved; more are dropped (and counted) until the queue drains
MAX_PENDING = 256
#: resolutions running at once
RESOLVERS = 4
#: service names remembered so that each bad one is logged once
MAX_LOGGED = 1024
RESOLVE_TIMEOUT_MS = 3_000
MAX_NAME_LEN = 255
MAX_TXT_BYTES = 1_024
MAX_TXT_KEYS = 16
MAX_CLUSTER_LEN = 63
MAX_VERSION_LEN = 32
MAX_ADDRESSES = 16
MAX_KAFKA_NODE_ID = 2**31 - 1

TXT_KEY = b"key"
TXT_NODE = b"node"
TXT_VERSION = b"ver"
TXT_CLUSTER = b"cluster"

FoundFn = Callable[[bytes, str], None]


class MdnsRecordError(ValueError):
    """A discovered service that cannot be used; `field` names the part that is wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class MdnsPeer:
    """A checked service: who it claims to be and where its mesh listener is."""

    key: bytes
    addr: str  # "host:port", IPv6 as "[host]:port"
    kafka_node_id: int
    version: str
    cluster: str


# ---- the pure part: names, TXT records, checks ------------------------------------------------


def instance_name(node_key: bytes, service_type: str) -> str:
    return f"{to_base32(node_key)}.{service_type}"


def txt_properties(node_key: bytes, kafka_node_id: int, version: str,
                   cluster: str) -> dict[str, str]:
    props = {"key": node_key.hex(), "node": str(kafka_node_id), "ver": version}
    if cluster:
        props["cluster"] = cluster
    return props


def _printable(value: str) -> bool:
    return value.isascii() and value.isprintable()


def check_cluster(cluster: str) -> str:
    if len(cluster) > MAX_CLUSTER_LEN or not _printable(cluster):
        raise ValueError(f"mDNS cluster name {cluster!r}: at most {MAX_CLUSTER_LEN} printable "
                         "ASCII characters")
    return cluster


def format_addr(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> str:
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


def _key_from_name(name: str, service_type: str) -> bytes:
    if len(name) > MAX_NAME_LEN:
        raise MdnsRecordError("name", f"{len(name)} characters, at most {MAX_NAME_LEN}")
    suffix = "." + service_type
    if not name.lower().endswith(suffix.lower()):
        raise MdnsRecordError("name", f"not of type {service_type}")
    label = name[: -len(suffix)].lower()
    if len(label) != BASE32_LEN:
        raise MdnsRecordError("name", f"instance label is not {BASE32_LEN} base32 characters")
    try:
        raw = base64.b32decode(label.upper() + "====")
    except (binascii.Error, ValueError):
        raise MdnsRecordError("name", "instance label is not base32") from None
    if len(raw) != NODE_ID_LEN or to_base32(raw) != label:
        raise MdnsRecordError("name", "instance label is not a canonical base32 node id")
    return raw


def _text(props: Mapping[bytes, bytes | None], field: bytes, limit: int, *,
          required: bool) -> str:
    name = "txt." + field.decode()
    value = props.get(field)
    if value is None:
        if required:
            raise MdnsRecordError(name, "missing")
        return ""
    if len(value) > limit:
        raise MdnsRecordError(name, f"{len(value)} bytes, at most {limit}")
    try:
        text = value.decode("ascii")
    except UnicodeDecodeError:
        raise MdnsRecordError(name, "not ASCII") from None
    if not text.isprintable():
        raise MdnsRecordError(name, "not printable")
    return text


def _pick_address(addresses: Sequence[bytes]) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The first usable IPv4 address, else the first usable IPv6 address."""
    v6: ipaddress.IPv6Address | None = None
    for packed in addresses[:MAX_ADDRESSES]:
        if len(packed) not in (4, 16):
            continue
        ip = ipaddress.ip_address(packed)
        if ip.is_unspecified or ip.is_multicast:
            continue
        if isinstance(ip, ipaddress.IPv4Address):
            if ip == ipaddress.IPv4Address("255.255.255.255"):
                continue
            return ip
        if ip.is_link_local or ip.ipv4_mapped is not None:
            continue  # no scope id to dial a link-local address with; mapped: use IPv4 records
        v6 = v6 or ip
    if v6 is None:
        raise MdnsRecordError("address", "no usable IPv4 or IPv6 address")
    return v6


def parse_service(name: str, service_type: str, properties: Mapping[bytes, bytes | None],
                  text_len: int, port: int | None, addresses: Sequence[bytes]) -> MdnsPeer:
    """Check one resolved service; raises MdnsRecordError naming the bad field."""
    key = _key_from_name(name, service_type)
    if text_len > MAX_TXT_BYTES:
        raise MdnsRecordError("txt", f"{text_len} bytes, at most {MAX_TXT_BYTES}")
    if len(properties) > MAX_TXT_KEYS:
        raise MdnsRecordError("txt", f"{len(properties)} entries, at most {MAX_TXT_KEYS}")
    key_hex = _text(properties, TXT_KEY, HEX_LEN, required=True)
    if len(key_hex) != HEX_LEN:
        raise MdnsRecordError("txt.key", f"{len(key_hex)} characters, expected {HEX_LEN}")
    try:
        txt_key = bytes.fromhex(key_hex)
    except ValueError:
        raise MdnsRecordError("txt.key", "not hex") from None
    if txt_key != key:
        raise MdnsRecordError("txt.key", "does not match the service name")
    node_text = _text(properties, TXT_NODE, 10, required=True)
    if not node_text.isdigit() or int(node_text) > MAX_KAFKA_NODE_ID:
        raise MdnsRecordError("txt.node", f"{node_text!r} is not a node id "
                              f"in 0..{MAX_KAFKA_NODE_ID}")
    version = _text(properties, TXT_VERSION, MAX_VERSION_LEN, required=True)
    cluster = _text(properties, TXT_CLUSTER, MAX_CLUSTER_LEN, required=False)
    if port is None or not 1 <= port <= 65535:
        raise MdnsRecordError("port", f"{port!r} not in 1..65535")
    ip = _pick_address(addresses)
    return MdnsPeer(key=key, addr=format_addr(ip, port), kafka_node_id=int(node_text),
                    version=version, cluster=cluster)


def _advertised_addresses(host: str, interfaces: list[str] | None) -> list[str]:
    """The addresses to publish for a mesh listener bound to ``host``.

    An IP literal is published as it is; for a wildcard (or a host name) the literal IPs among
    ``interfaces``, else every non-loopback address of the machine.
    """
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = ipaddress.IPv4Address("0.0.0.0")
    if not ip.is_unspecified:
        return [str(ip)]
    literal: list[str] = []
    for iface in interfaces or []:
        with contextlib.suppress(ValueError):
            if not ipaddress.ip_address(iface).is_unspecified:
                literal.append(iface)
    if literal:
        return literal
    everything = get_all_addresses()
    lan = [a for a in everything if not ipaddress.ip_address(a).is_loopback]
    return lan or everything or ["127.0.0.1"]


# ---- the asyncio adapter ------------------------------------------------------------------------


class MdnsDiscovery:
    """Publish this node on mDNS and report the peers found (see the module docstring)."""

    def __init__(self, node_key: bytes, mesh_addr: tuple[str, int], kafka_node_id: int,
                 on_found: FoundFn, *, service_type: str = DEFAULT_SERVICE_TYPE,
                 interfaces: list[str] | None = None, cluster: str = "") -> None:
        if len(node_key) != NODE_ID_LEN:
            raise ValueError(f"node key: {len(node_key)} bytes, expected {NODE_ID_LEN}")
        if not 1 <= mesh_addr[1] <= 65535:
            raise ValueError(f"mesh port {mesh_addr[1]} not in 1..65535")
        if not 0 <= kafka_node_id <= MAX_KAFKA_NODE_ID:
            raise ValueError(f"kafka node id {kafka_node_id} not in 0..{MAX_KAFKA_NODE_ID}")
        self.key = node_key
        self.mesh_addr = mesh_addr
        self.kafka_node_id = kafka_node_id
        self.on_found = on_found
        self.service_type = service_type
        self.interfaces = interfaces
        self.cluster = check_cluster(cluster)
        self.name = instance_name(node_key, service_type)
        #: what happened to the services heard: found, other_cluster, bad, unresolved, dropped
        self.counts: Counter[str] = Counter()
        self._known: OrderedDict[bytes, str] = OrderedDict()
        self._logged: OrderedDict[str, None] = OrderedDict()
        self._queued: set[str] = set()
        self._queue: asyncio.Queue[str] = asyncio.Queue(MAX_PENDING)
        self._azc: AsyncZeroconf | None = None
        self._browser: AsyncServiceBrowser | None = None
        self._info: AsyncServiceInfo | None = None
        self._workers: list[asyncio.Task[None]] = []
        self._announcing: Awaitable[object] | None = None
        self._closed = False

    def known_peers(self) -> dict[bytes, str]:
        """Peers found and not gone (node key -> "host:port"), at most MAX_KNOWN."""
        return dict(self._known)

    async def start(self) -> None:
        """Register our service (returns after mDNS probing, ~0.8 s) and browse for others."""
        host, port = self.mesh_addr
        addrs = _advertised_addresses(host, self.interfaces)
        v6 = any(ipaddress.ip_address(a).version == 6 for a in addrs + self._literal_ifaces())
        self._azc = AsyncZeroconf(
            interfaces=self.interfaces if self.interfaces is not None else InterfaceChoice.All,
            ip_version=IPVersion.All if v6 else IPVersion.V4Only,
        )
        b32 = to_base32(self.key)
        self._info = AsyncServiceInfo(
            self.service_type, self.name, port=port,
            properties=txt_properties(self.key, self.kafka_node_id, __version__, self.cluster),
            server=f"{b32}.local.", parsed_addresses=addrs,
        )
        try:  # returns after probing; the announcements go on in the background
            self._announcing = await self._azc.async_register_service(self._info)
        except Exception as exc:  # a name conflict (our key elsewhere on the LAN), a socket error
            log.error("mDNS: cannot register %s (%s); browsing only", short(self.key), exc)
            self._info = None
        loop = asyncio.get_running_loop()
        self._workers = [loop.create_task(self._resolver()) for _ in range(RESOLVERS)]
        self._browser = AsyncServiceBrowser(self._azc.zeroconf, self.service_type,
                                            handlers=[self._on_change])

    async def close(self) -> None:
        """Stop browsing, say goodbye (unregister) and close the sockets."""
        if self._closed:
            return
        self._closed = True
        for task in self._workers:
            task.cancel()
        if self._workers:
            await asyncio.gather(*self._workers, return_exceptions=True)
        if self._announcing is not None:
            with contextlib.suppress(Exception):
                await self._announcing
        if self._browser is not None:
            await self._browser.async_cancel()
        if self._azc is not None:
            await self._azc.async_close()

    def _literal_ifaces(self) -> list[str]:
        out: list[str] = []
        for iface in self.interfaces or []:
            with contextlib.suppress(ValueError):
                out.append(str(ipaddress.ip_address(iface)))
        return out

    # ---- browsing and resolving -------------------------------------------------------------

    def _on_change(self, zeroconf: Zeroconf, service_type: str, name: str,
                   state_change: ServiceStateChange) -> None:
        """Called by the browser in the event loop; must not raise or block."""
        if self._closed or name.lower() == self.name.lower():
            return
        if state_change is ServiceStateChange.Removed:
            with contextlib.suppress(MdnsRecordError):
                key = _key_from_name(name, self.service_type)
                if self._known.pop(key, None) is not None:
                    log.info("mDNS: peer %s left", short(key))
            return
        if name in self._queued:
            return
        if len(name) > MAX_NAME_LEN:
            self.counts["bad"] += 1
            return
        try:
            self._queue.put_nowait(name)
        except asyncio.QueueFull:
            self.counts["dropped"] += 1
            return
        self._queued.add(name)

    async def _resolver(self) -> None:
        while True:
            name = await self._queue.get()
            try:
                await self._resolve(name)
            except asyncio.CancelledError:
                raise
            except Exception:  # a zeroconf surprise must not stop discovery
                log.exception("mDNS: resolving %r failed", name)
            finally:
                self._queued.discard(name)

    async def _resolve(self, name: str) -> None:
        azc = self._azc
        assert azc is not None
        try:
            info = AsyncServiceInfo(self.service_type, name)
        except Exception as exc:  # zeroconf's own name checks
            self._bad(name, MdnsRecordError("name", str(exc) or type(exc).__name__))
            return
        if not await info.async_request(azc.zeroconf, RESOLVE_TIMEOUT_MS):
            self.counts["unresolved"] += 1
            log.debug("mDNS: %r did not resolve", name)
            return
        try:
            try:
                props, text = info.properties, info.text or b""
                addresses = info.addresses_by_version(IPVersion.All)
            except Exception as exc:  # zeroconf could not make sense of the records
                raise MdnsRecordError("txt", f"unreadable ({exc!r:.100})") from None
            peer = parse_service(name, self.service_type, props, len(text), info.port, addresses)
        except MdnsRecordError as exc:
            self._bad(name, exc)
            return
        self._consider(peer, name)

    def _consider(self, peer: MdnsPeer, name: str) -> None:
        if peer.key == self.key:
            return
        if peer.cluster != self.cluster:
            self.counts["other_cluster"] += 1
            if self._first_time(name):
                log.info("mDNS: ignoring %s of cluster %r (ours is %r)", short(peer.key),
                         peer.cluster, self.cluster)
            return
        if self._known.get(peer.key) == peer.addr:
            self._known.move_to_end(peer.key)
            return
        self._known[peer.key] = peer.addr
        self._known.move_to_end(peer.key)
        while len(self._known) > MAX_KNOWN:
            self._known.popitem(last=False)
        self.counts["found"] += 1
        log.info("mDNS: found %s at %s (kafka node %d, version %s)", short(peer.key), peer.addr,
                 peer.kafka_node_id, peer.version)
        try:
            self.on_found(peer.key, peer.addr)
        except Exception:
            log.exception("mDNS: on_found for %s failed", short(peer.key))

    def _bad(self, name: str, exc: MdnsRecordError) -> None:
        self.counts["bad"] += 1
        if self._first_time(name):
            log.warning("mDNS: ignoring service %r: %s", name, exc)

    def _first_time(self, name: str) -> bool:
        if name in self._logged:
            return False
        self._logged[name] = None
        while len(self._logged) > MAX_LOGGED:
            self._logged.popitem(last=False)
        return True

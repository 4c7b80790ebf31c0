"""Kafka's listener settings: ``listeners``, ``advertised.listeners``,
``listener.security.protocol.map`` and ``inter.broker.listener.name``.

Pure parsing (no I/O): the config model validates with these functions and asks for the
listeners as ``ListenerSpec`` values. Errors are ValueErrors naming the setting.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "DEFAULT_PROTOCOL_MAP",
    "PROTOCOLS",
    "ListenerSpec",
    "parse_listener_list",
    "parse_protocol_map",
    "resolve_listeners",
]

#: the security protocols Kafka knows (and Eddy serves)
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: Kafka's default listener.security.protocol.map
DEFAULT_PROTOCOL_MAP = ("PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                        "SASL_SSL:SASL_SSL")
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_WILDCARD = ("0.0.0.0", "::", "")


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    """One Kafka listener: where it binds, what clients are told, how it is secured."""

    name: str
    host: str  # "" binds every interface (Kafka's NAME://:PORT)
    port: int
    protocol: str  # one of PROTOCOLS
    advertised_host: str
    advertised_port: int | None  # None: the bound port (listening on port 0)

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def _host_port(text: str, setting: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{setting}: expected NAME://HOST:PORT, got port {port!r}")
    return host.strip("[]"), int(port)


def parse_listener_list(value: str, setting: str) -> list[tuple[str, str, int]]:
    """``NAME://HOST:PORT,...`` as (NAME, host, port); names are upper-cased and unique."""
    out: list[tuple[str, str, int]] = []
    for item in (i.strip() for i in value.split(",")):
        if not item:
            continue
        name, sep, rest = item.partition("://")
        if not sep or not _NAME.match(name):
            raise ValueError(f"{setting}: expected NAME://HOST:PORT items, got {item!r}")
        host, port = _host_port(rest, setting)
        name = name.upper()
        if any(n == name for n, _, _ in out):
            raise ValueError(f"{setting}: listener {name} is named twice")
        out.append((name, host, port))
    if not out:
        raise ValueError(f"{setting}: no listener given")
    return out


def parse_protocol_map(value: str) -> dict[str, str]:
    """``NAME:PROTOCOL,...`` as listener name -> security protocol."""
    out: dict[str, str] = {}
    for item in (i.strip() for i in value.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or not _NAME.match(name.strip()) or protocol not in PROTOCOLS:
            raise ValueError(f"listener.security.protocol.map: expected NAME:PROTOCOL items "
                             f"(PROTOCOL one of {', '.join(PROTOCOLS)}), got {item!r}")
        out[name.strip().upper()] = protocol
    return out


def resolve_listeners(listeners: str, advertised: str | None, protocol_map: str,
                      inter_broker: str | None) -> list[ListenerSpec]:
    """The node's listeners, the inter-broker one first (the address the node registers
    in the cluster and announces on the mesh, and the one the EDDY_READY line names);
    the others in the order given."""
    protocols = parse_protocol_map(protocol_map)
    bound = parse_listener_list(listeners, "listeners")
    told: dict[str, tuple[str, int]] = {}
    if advertised:
        for name, host, port in parse_listener_list(advertised, "advertised.listeners"):
            if not any(n == name for n, _, _ in bound):
                raise ValueError(f"advertised.listeners: {name} is not in listeners")
            if host in _WILDCARD:
                raise ValueError(f"advertised.listeners: {name} advertises {host!r}, which "
                                 "no client can connect to")
            told[name] = (host, port)
    specs: list[ListenerSpec] = []
    for name, host, port in bound:
        protocol = protocols.get(name)
        if protocol is None:
            raise ValueError(f"listener.security.protocol.map: no security protocol for "
                             f"listener {name}")
        if name in told:
            adv_host, adv_port = told[name]
            specs.append(ListenerSpec(name, host, port, protocol, adv_host, adv_port))
        else:
            adv_host = "127.0.0.1" if host in _WILDCARD else host
            specs.append(ListenerSpec(name, host, port, protocol, adv_host,
                                      None if port == 0 else port))
    first = inter_broker.strip().upper() if inter_broker else specs[0].name
    chosen = [s for s in specs if s.name == first]
    if not chosen:
        raise ValueError(f"inter.broker.listener.name: {first} is not in listeners")
    return chosen + [s for s in specs if s.name != first]

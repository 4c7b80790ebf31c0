"""A broker's Kafka endpoints in its registration (``BrokerRecord.kafka_addr``).

A node with one listener registers ``host:port``. A node with several registers
``host:port,NAME=host:port,...``: first its inter-broker listener's address (what other
brokers fetch from and probe), then every listener by name, as Kafka's broker
registration lists its endpoints, so a client is told each broker's address on the
listener it came in on (Kafka's rule). A listener a broker lacks falls back to the first.
"""

from __future__ import annotations

__all__ = ["MAX_ENDPOINTS", "check_endpoints", "encode_endpoints", "endpoint",
           "inter_broker"]

#: listeners one registration may name
MAX_ENDPOINTS = 16


def _host_port(text: str) -> tuple[str, int] | None:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host.strip("[]"), int(port)


def encode_endpoints(first: tuple[str, int], named: list[tuple[str, str, int]]) -> str:
    """``first`` is the inter-broker address; ``named`` (listener, host, port) every
    listener (left out with a single listener)."""
    out = [f"{first[0]}:{first[1]}"]
    if len(named) > 1:
        out.extend(f"{name}={host}:{port}" for name, host, port in named)
    return ",".join(out)


def inter_broker(kafka_addr: str) -> str:
    """The inter-broker ``host:port`` of a registration."""
    return kafka_addr.partition(",")[0]


def endpoint(kafka_addr: str, listener: str | None = None) -> tuple[str, int] | None:
    """(host, port) of ``listener`` in a registration (the first address when it is None
    or not named there); None when the text does not parse."""
    first, _, rest = kafka_addr.partition(",")
    if listener is not None and rest:
        for part in rest.split(","):
            name, sep, addr = part.partition("=")
            if sep and name == listener:
                return _host_port(addr)
    return _host_port(first)


def check_endpoints(kafka_addr: str) -> str | None:
    """Why a registration's ``kafka_addr`` is malformed (None: it is fine)."""
    first, _, rest = kafka_addr.partition(",")
    if _host_port(first) is None:
        return f"kafka_addr: {first[:64]!r} is not HOST:PORT"
    parts = rest.split(",") if rest else []
    if len(parts) > MAX_ENDPOINTS:
        return f"kafka_addr: more than {MAX_ENDPOINTS} listeners"
    names = set()
    for part in parts:
        name, sep, addr = part.partition("=")
        if not sep or not name or _host_port(addr) is None:
            return f"kafka_addr: {part[:64]!r} is not NAME=HOST:PORT"
        if name in names:
            return f"kafka_addr: listener {name[:64]!r} twice"
        names.add(name)
    return None

"""Who may connect: `max.connections` and `max.connections.per.ip` (with
`max.connections.per.ip.overrides`), as Kafka counts them; and a log throttle so that a
flood of refused or dropped connections makes a few lines, not one per connection.
Sans-IO, apart from resolving the host names of the overrides once at start-up."""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Mapping


def normalise_ip(address: str) -> str:
    """One spelling per address: IPv4-mapped IPv6 addresses as IPv4."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def resolve_overrides(overrides: Mapping[str, int]) -> dict[str, int]:
    """The per-IP overrides by address: IP literals as they are, host names resolved
    (every address they have). Raises OSError naming the setting if one does not resolve."""
    out: dict[str, int] = {}
    for host, limit in overrides.items():
        try:
            out[normalise_ip(str(ipaddress.ip_address(host)))] = limit
            continue
        except ValueError:
            pass
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except OSError as exc:
            raise OSError(
                f"max.connections.per.ip.overrides: cannot resolve {host!r}: {exc}"
            ) from None
        for info in infos:
            out[normalise_ip(str(info[4][0]))] = limit
    return out


class ConnectionLimits:
    """Counts open connections in total and per client address."""

    def __init__(self, max_connections: int, max_per_ip: int,
                 overrides: Mapping[str, int] | None = None) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.overrides = {normalise_ip(k): v for k, v in (overrides or {}).items()}
        self.total = 0
        self._per_ip: dict[str, int] = {}

    def count(self, ip: str) -> int:
        return self._per_ip.get(normalise_ip(ip), 0)

    def admit(self, ip: str) -> str | None:
        """Count a new connection from ip, or say (without counting it) which limit it
        is over."""
        ip = normalise_ip(ip)
        if self.total >= self.max_connections:
            return f"max.connections={self.max_connections} reached"
        limit = self.overrides.get(ip, self.max_per_ip)
        held = self._per_ip.get(ip, 0)
        if held >= limit:
            name = ("max.connections.per.ip.overrides" if ip in self.overrides
                    else "max.connections.per.ip")
            return f"{name}={limit} reached for {ip}"
        self.total += 1
        self._per_ip[ip] = held + 1
        return None

    def release(self, ip: str) -> None:
        """An admitted connection from ip has closed."""
        ip = normalise_ip(ip)
        held = self._per_ip.get(ip, 0)
        if held <= 0:
            return
        self.total -= 1
        if held == 1:
            del self._per_ip[ip]
        else:
            self._per_ip[ip] = held - 1


class LogThrottle:
    """Logs at most one line per interval (seconds, by the caller's clock); the next
    line says how many were left out in between."""

    def __init__(self, logger: logging.Logger, level: int, interval: float = 10.0) -> None:
        self._logger = logger
        self._level = level
        self._interval = interval
        self._next = float("-inf")
        self._left_out = 0

    def log(self, now: float, msg: str, *args: object) -> bool:
        """Log msg % args unless a line went out less than interval ago; True if logged."""
        if now < self._next:
            self._left_out += 1
            return False
        if self._left_out:
            msg += " (and %d more like it since the last such line)"
            args = (*args, self._left_out)
        self._logger.log(self._level, msg, *args)
        self._next = now + self._interval
        self._left_out = 0
        return True

"""Raw (kio) connections of the `eddy` commands that send requests librdkafka's admin client
does not offer (reassignments, DescribeCluster's controller, transactions), with the
security settings (-X: TLS, SASL) the other commands give librdkafka."""

from __future__ import annotations

from eddy.cli.common import REQUEST_TIMEOUT_S, CliError, Conn, parse_bootstrap
from eddy.client.raw import RawClient
from eddy.client.raw_security import SecurityError, security_of

__all__ = ["raw_client"]


def raw_client(conn: Conn, at: tuple[str, int] | None = None,
               timeout_s: float = REQUEST_TIMEOUT_S) -> RawClient:
    """A raw connection to ``at`` (default: the first bootstrap broker), logged in and
    encrypted as ``conn``'s -X settings say; CliError naming what failed."""
    host, port = at if at is not None else parse_bootstrap(conn.bootstrap)[0]
    try:
        security = security_of(conn.extra)
    except SecurityError as exc:
        raise CliError(f"{exc}; check the -X/--client-config settings") from None
    try:
        return RawClient(host, port, timeout_s, security=security)
    except SecurityError as exc:
        raise CliError(f"cannot connect to {host}:{port}: {exc}") from None
    except OSError as exc:
        raise CliError(f"cannot reach a broker at {host}:{port} ({exc.strerror or exc}); "
                       "check the address or pass --bootstrap HOST:PORT") from None

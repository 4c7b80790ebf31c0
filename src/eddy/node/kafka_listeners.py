"""The Kafka listeners of a node: one KafkaServer per configured listener, with the TLS
context and SASL service each needs, and the bootstrap user of sasl.bootstrap.user.

The first listener (the inter-broker one) serves the node itself: its address is the one
the node registers in the cluster and announces on the mesh. Every other listener serves a
``ListenerView`` of the node, which answers Metadata, FindCoordinator and DescribeCluster
with that listener's own advertised address (Kafka's rule: clients are told the endpoints
of the listener they came in on). Other brokers of a cluster are named by their address on that
listener too: a registration lists every listener's endpoint (eddy.metadata.
endpoints), and handlers pick the one of ``node.listener_name``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from eddy.broker.server import KafkaServer, NodeHandler
from eddy.cluster.controller.rpc import ProposeRequest
from eddy.config import BrokerConfig
from eddy.metadata import encode_command
from eddy.metadata.commands import UpsertScramUser
from eddy.protocol.apis import ApiKey, VersionRange
from eddy.security.remote_credentials import CredentialCache, PrefetchingSaslService
from eddy.security.sasl import CredentialLookup
from eddy.security.scram import MECHANISMS, derive_keys, salted_password
from eddy.security.session import SaslService
from eddy.security.settings import bootstrap_user, mechanisms
from eddy.security.tls import TlsContext, TlsMaterial

__all__ = ["BOOTSTRAP_ITERATIONS", "ListenerView", "ensure_bootstrap_user", "make_servers"]

log = logging.getLogger("eddy")
BOOTSTRAP_ITERATIONS = 8192


class ListenerView:
    """The node as the clients of one extra listener see it: its own host and port,
    everything else the node's."""

    def __init__(self, node: Any, host: str, port: int, listener_name: str) -> None:
        object.__setattr__(self, "_node", node)
        object.__setattr__(self, "listener_name", listener_name)
        object.__setattr__(self, "host", host)
        object.__setattr__(self, "port", port)

    def __getattr__(self, name: str) -> Any:
        return getattr(object.__getattribute__(self, "_node"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("host", "port"):
            object.__setattr__(self, name, value)
        else:
            setattr(object.__getattribute__(self, "_node"), name, value)

    def set_advertised_port(self, port: int) -> None:
        object.__setattr__(self, "port", port)


def make_servers(config: BrokerConfig, node: Any, lookup: CredentialLookup | CredentialCache,
                 handlers: Mapping[ApiKey, NodeHandler] | None = None,
                 versions: Mapping[ApiKey, VersionRange] | None = None) -> list[KafkaServer]:
    """One server per listener, the inter-broker one first. TLS material that does not
    load raises TlsError (a ValueError naming the setting). ``lookup``: the node's own
    replica of the metadata (``cluster_lookup``), or a gateway's cache of a broker's
    answers (eddy.security.remote_credentials), filled before each exchange reads it."""
    specs = config.listener_specs
    tls: TlsContext | None = None
    if any(s.tls for s in specs):
        tls = TlsContext(TlsMaterial.from_config(config),
                         os.path.join(config.data_dir, ".tls"),
                         config.ssl_reload_check_interval_ms / 1000)
    sasl: SaslService | None = None
    if any(s.sasl for s in specs):
        args = (config.connections_max_reauth_ms,
                config.connection_failed_authentication_delay_ms,
                config.sasl_failed_logins_per_ip_per_minute)
        enabled = mechanisms(config.sasl_enabled_mechanisms)
        sasl = (PrefetchingSaslService(enabled, lookup, *args)
                if isinstance(lookup, CredentialCache) else SaslService(enabled, lookup, *args))
    servers = []
    for i, spec in enumerate(specs):
        port = spec.advertised_port if spec.advertised_port is not None else spec.port
        served = node if i == 0 else ListenerView(node, spec.advertised_host, port, spec.name)
        servers.append(KafkaServer(served, handlers=handlers, versions=versions,
                                   listener=spec, tls=tls, sasl=sasl))
    return servers


async def ensure_bootstrap_user(config: BrokerConfig, cluster: Any, timeout_s: float) -> None:
    """Create sasl.bootstrap.user's SCRAM credentials (both mechanisms) unless the cluster
    already has a credential of that name. Never logs the password."""
    if config.sasl_bootstrap_user is None or cluster is None:
        return
    name, password = bootstrap_user(config.sasl_bootstrap_user.get_secret_value())
    state = cluster.state
    if any(state.scram_credential(name, t) is not None for t in MECHANISMS):
        return
    for mech_type, mech in sorted(MECHANISMS.items()):
        salt = os.urandom(32)
        salted = salted_password(mech, password.encode(), salt, BOOTSTRAP_ITERATIONS)
        keys = derive_keys(mech, salted)
        command = UpsertScramUser(name, mech_type, salt, keys.stored_key, keys.server_key,
                                  BOOTSTRAP_ITERATIONS)
        try:
            await cluster.ask_checked(ProposeRequest(encode_command(command)), timeout_s)
        except Exception as exc:
            log.error("sasl.bootstrap.user: cannot create %s's %s credential: %s", name,
                      mech.name, exc)
            return

        def applied(s: Any, t: int = mech_type) -> bool:
            return s.scram_credential(name, t) is not None

        await cluster.wait_applied(applied, timeout_s)
    log.info("sasl.bootstrap.user: created user %s (SCRAM-SHA-256, SCRAM-SHA-512)", name)

"""Checks of the security settings together (the config model's validator calls them):
each problem is a ValueError naming the setting."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from eddy.security.authorizer import parse_super_users
from eddy.security.listeners import ListenerSpec, resolve_listeners

if TYPE_CHECKING:
    from eddy.broker.settings import BrokerSettings

__all__ = ["AUTHORIZERS", "CLIENT_AUTH", "HTTP_AUTHENTICATION_METHODS", "MECHANISMS",
           "authorizer_enabled", "bootstrap_user", "check_security",
           "http_authentication_method", "inter_broker_credentials",
           "inter_broker_mechanism", "mechanisms"]

#: the SASL mechanisms Eddy serves
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
CLIENT_AUTH = ("none", "requested", "required")
#: registry.authentication.method / admin.authentication.method (Confluent's names)
HTTP_AUTHENTICATION_METHODS = ("NONE", "BASIC")
#: authorizer.class.name values that turn Eddy's ACL authorizer on (Kafka's names too, so a
#: Kafka server.properties works unchanged)
AUTHORIZERS = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer",
               "kafka.security.authorizer.AclAuthorizer", "eddy")


def authorizer_enabled(config: BrokerSettings) -> bool:
    return bool(config.authorizer_class_name.strip())


def mechanisms(value: str) -> list[str]:
    """sasl.enabled.mechanisms as its mechanisms, upper-cased, checked."""
    out = [m.strip().upper() for m in value.split(",") if m.strip()]
    unknown = [m for m in out if m not in MECHANISMS]
    if unknown or not out:
        raise ValueError(f"sasl.enabled.mechanisms: {', '.join(unknown) or 'none given'}: "
                         f"supported are {', '.join(MECHANISMS)}")
    return list(dict.fromkeys(out))


def bootstrap_user(value: str, setting: str = "sasl.bootstrap.user") -> tuple[str, str]:
    """sasl.bootstrap.user (or ``setting``) as (name, password); the message never holds
    the value."""
    name, sep, password = value.partition(":")
    if not sep or not name.strip() or not password:
        raise ValueError(f"{setting}: expected NAME:PASSWORD with both non-empty")
    return name.strip(), password


#: the mechanism an unset sasl.mechanism.inter.broker.protocol takes: the first enabled
STRONGEST_FIRST = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")


def inter_broker_mechanism(config: BrokerSettings) -> str:
    """sasl.mechanism.inter.broker.protocol, upper-cased, checked; unset, the strongest of
    sasl.enabled.mechanisms."""
    value = config.sasl_mechanism_inter_broker_protocol.strip().upper()
    if not value:
        enabled = mechanisms(config.sasl_enabled_mechanisms)
        return next(m for m in STRONGEST_FIRST if m in enabled)
    if value not in MECHANISMS:
        raise ValueError(f"sasl.mechanism.inter.broker.protocol: {value[:64]!r} is not one of "
                         f"{', '.join(MECHANISMS)}")
    return value


def inter_broker_credentials(config: BrokerSettings) -> tuple[str, str] | None:
    """(name, password) the node logs in with on a SASL inter-broker listener:
    sasl.inter.broker.user, else sasl.bootstrap.user; None when neither is set."""
    if config.sasl_inter_broker_user is not None:
        return bootstrap_user(config.sasl_inter_broker_user.get_secret_value(),
                              "sasl.inter.broker.user")
    if config.sasl_bootstrap_user is not None:
        return bootstrap_user(config.sasl_bootstrap_user.get_secret_value())
    return None


def _check_inter_broker(config: BrokerSettings, specs: list[ListenerSpec]) -> None:
    mechanism = inter_broker_mechanism(config)
    credentials = inter_broker_credentials(config)
    if not specs or not specs[0].sasl or "broker" not in config.roles:
        return  # a gateway alone: no node logs in to it (its SASL users come from a broker)
    if credentials is None:
        raise ValueError(f"listener {specs[0].name} (inter-broker) uses SASL: set "
                         "sasl.inter.broker.user or sasl.bootstrap.user (NAME:PASSWORD the "
                         "nodes log in to each other with)")
    if mechanism not in mechanisms(config.sasl_enabled_mechanisms):
        raise ValueError(f"sasl.mechanism.inter.broker.protocol={mechanism}: not in "
                         f"sasl.enabled.mechanisms ({config.sasl_enabled_mechanisms}), so the "
                         "inter-broker listener would refuse it")


def http_authentication_method(value: str, setting: str) -> str:
    """registry/admin.authentication.method, upper-cased, checked."""
    method = value.strip().upper()
    if method not in HTTP_AUTHENTICATION_METHODS:
        raise ValueError(f"{setting}: expected one of {', '.join(HTTP_AUTHENTICATION_METHODS)}, "
                         f"got {value!r}")
    return method


def _check_http_authentication(config: BrokerSettings, http: str, value: str) -> None:
    setting = f"{http}.authentication.method"
    method = http_authentication_method(value, setting)
    if method == "BASIC" and not config.clustered:
        raise ValueError(f"{setting}=BASIC: the users' credentials live in the cluster's "
                         "metadata and this node has no controller quorum (leave "
                         "process.roles unset to run as a cluster of one)")


def check_security(config: BrokerSettings, http: Mapping[str, tuple[bool, str]]) -> None:
    """The security settings of ``config`` together, and those of its HTTP listeners:
    ``http`` maps each (registry, admin) to its (``<name>.ssl.enabled``,
    ``<name>.authentication.method``)."""
    specs = (resolve_listeners(config.listeners, config.advertised_listeners,
                               config.listener_security_protocol_map,
                               config.inter_broker_listener_name)
             if config.listeners is not None else [])
    for setting, kind in (("ssl.keystore.type", config.ssl_keystore_type),
                          ("ssl.truststore.type", config.ssl_truststore_type)):
        if kind.upper() != "PEM":
            raise ValueError(f"{setting}: only PEM is supported (KIP-651), got {kind!r}")
    if config.ssl_client_auth.lower() not in CLIENT_AUTH:
        raise ValueError(f"ssl.client.auth: expected one of {', '.join(CLIENT_AUTH)}, got "
                         f"{config.ssl_client_auth!r}")
    mechanisms(config.sasl_enabled_mechanisms)
    name = config.authorizer_class_name.strip()
    if name and name not in AUTHORIZERS:
        raise ValueError(f"authorizer.class.name: {name!r} is not one of {', '.join(AUTHORIZERS)}"
                         " (or empty: no authorization)")
    parse_super_users(config.super_users)
    if name and not config.clustered:
        raise ValueError("authorizer.class.name: the ACLs live in the cluster's metadata and "
                         "this node has no controller quorum (leave process.roles unset to "
                         "run as a cluster of one)")
    if name and "gateway" in config.roles:
        raise ValueError("authorizer.class.name: a gateway does not authorize requests (the "
                         "brokers do, as the gateway's client: set it on the brokers)")
    if config.sasl_bootstrap_user is not None:
        bootstrap_user(config.sasl_bootstrap_user.get_secret_value())
    _check_inter_broker(config, specs)
    for name, (_, method) in http.items():
        _check_http_authentication(config, name, method)
    tls = [f"listener {s.name}" for s in specs if s.tls]
    tls += [f"{name}.ssl.enabled" for name, (on, _) in http.items() if on]
    if tls:
        has_chain = config.ssl_keystore_certificate_chain is not None
        has_key = config.ssl_keystore_key is not None
        if config.ssl_keystore_location is None and not (has_chain and has_key):
            raise ValueError(f"{tls[0]} uses TLS: set ssl.keystore.location (a PEM "
                             "file with key and chain) or both ssl.keystore.certificate.chain "
                             "and ssl.keystore.key")
        if has_chain != has_key:
            raise ValueError("ssl.keystore.certificate.chain and ssl.keystore.key go together")
        trust = (config.ssl_truststore_location is not None
                 or config.ssl_truststore_certificates is not None)
        if config.ssl_client_auth.lower() != "none" and not trust:
            raise ValueError(f"ssl.client.auth={config.ssl_client_auth}: set "
                             "ssl.truststore.location or ssl.truststore.certificates (the CA "
                             "certificates client certificates are checked with)")

"""Connection limits (max.connections, max.connections.per.ip and its overrides), the log
throttle for floods, and the settings behind them and the memory pool."""

from __future__ import annotations

import logging

import pytest

from eddy.config import ConfigError, load_config
from eddy.security.connection_limits import (
    ConnectionLimits,
    LogThrottle,
    normalise_ip,
    resolve_overrides,
)


def test_per_ip_limit_refuses_the_next_and_frees_on_release() -> None:
    limits = ConnectionLimits(100, 2)
    assert limits.admit("10.0.0.1") is None
    assert limits.admit("10.0.0.1") is None
    refused = limits.admit("10.0.0.1")
    assert refused is not None and "max.connections.per.ip=2" in refused
    assert limits.admit("10.0.0.2") is None  # another address has its own count
    limits.release("10.0.0.1")
    assert limits.admit("10.0.0.1") is None
    assert limits.total == 3


def test_total_limit() -> None:
    limits = ConnectionLimits(2, 100)
    assert limits.admit("10.0.0.1") is None
    assert limits.admit("10.0.0.2") is None
    refused = limits.admit("10.0.0.3")
    assert refused is not None and "max.connections=2" in refused
    limits.release("10.0.0.2")
    assert limits.admit("10.0.0.3") is None


def test_overrides_and_ipv4_mapped_addresses_count_as_one() -> None:
    limits = ConnectionLimits(100, 1, {"127.0.0.1": 3})
    for _ in range(3):
        assert limits.admit("::ffff:127.0.0.1") is None
    refused = limits.admit("127.0.0.1")
    assert refused is not None and "overrides=3" in refused
    assert limits.count("127.0.0.1") == 3
    assert limits.admit("10.1.1.1") is None
    assert limits.admit("10.1.1.1") is not None


def test_releasing_an_unknown_address_changes_nothing() -> None:
    limits = ConnectionLimits(10, 10)
    limits.release("10.0.0.9")
    assert limits.total == 0


def test_zero_per_ip_with_an_override_admits_only_that_address() -> None:
    limits = ConnectionLimits(100, 0, {"10.0.0.7": 1})
    assert limits.admit("10.0.0.8") is not None
    assert limits.admit("10.0.0.7") is None


def test_overrides_resolve_host_names() -> None:
    assert resolve_overrides({"127.0.0.1": 5}) == {"127.0.0.1": 5}
    assert resolve_overrides({"localhost": 7})["127.0.0.1"] == 7
    with pytest.raises(OSError, match=r"max\.connections\.per\.ip\.overrides"):
        resolve_overrides({"no-such-host.invalid": 1})
    assert normalise_ip("::FFFF:10.0.0.1") == "10.0.0.1"


def test_log_throttle_logs_once_per_interval_and_counts_the_rest(
        caplog: pytest.LogCaptureFixture) -> None:
    throttle = LogThrottle(logging.getLogger("eddy.test"), logging.WARNING, interval=10)
    with caplog.at_level(logging.WARNING, logger="eddy.test"):
        assert throttle.log(100.0, "refused %s", "a")
        for i in range(500):
            assert not throttle.log(100.0 + i / 100, "refused %s", "b")
        assert throttle.log(110.0, "refused %s", "c")
    assert [r.getMessage() for r in caplog.records] == [
        "refused a", "refused c (and 500 more like it since the last such line)",
    ]


def test_settings_by_their_kafka_names() -> None:
    cfg = load_config(env={}, overrides={
        "max.connections": "50", "max.connections.per.ip": "5",
        "max.connections.per.ip.overrides": "hostA:100, 127.0.0.1:200,[::1]:3",
        "connections.max.idle.ms": "1000", "socket.request.read.timeout.ms": "2000",
        "queued.max.request.bytes": "-1",
    })
    assert (cfg.max_connections, cfg.max_connections_per_ip) == (50, 5)
    assert cfg.connection_overrides == {"hostA": 100, "127.0.0.1": 200, "::1": 3}
    assert (cfg.connections_max_idle_ms, cfg.socket_request_read_timeout_ms) == (1000, 2000)
    assert cfg.queued_max_request_bytes == -1


def test_defaults_are_bounded() -> None:
    cfg = load_config(env={})
    assert cfg.max_connections == cfg.max_connections_per_ip == 2**31 - 1  # Kafka's
    assert cfg.connections_max_idle_ms == 600000
    assert cfg.socket_request_max_bytes <= cfg.queued_max_request_bytes < 1 << 30


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"queued.max.request.bytes": "1000000"}, "queued.max.request.bytes"),
        ({"max.connections.per.ip.overrides": "hostA"}, "HOST:COUNT"),
        ({"max.connections.per.ip.overrides": "hostA:many"}, "HOST:COUNT"),
        ({"max.connections": "-1"}, "max.connections"),
    ],
)
def test_bad_settings_are_named(overrides: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        load_config(env={}, overrides=overrides)

"""`eddy serve` with no listener settings serves the schema registry and the HTTP admin
listener next to its Kafka listener, on their usual ports (8081 and 9644); a second node on
the same host goes on without them and says why; an empty setting turns each off.

Each test takes a loopback address of its own (127.x.y.z), so the fixed ports are free."""

from __future__ import annotations

import json
import random
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import EddyProcess

from eddy.config import ADMIN_PORT, REGISTRY_PORT, load_config


class HostNode(EddyProcess):
    """An `eddy serve` whose Kafka listener is on ``host`` (any free port)."""

    def __init__(self, data_dir: Path, host: str, *args: str) -> None:
        super().__init__(data_dir, ["--listen", f"{host}:0", *args])
        self.host = host

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"


def _free_host() -> str:
    """A loopback address whose ports 8081 and 9644 nobody holds."""
    for _ in range(50):
        host = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}"
        try:
            for port in (REGISTRY_PORT, ADMIN_PORT):
                with socket.socket() as s:
                    s.bind((host, port))
        except OSError:
            continue
        return host
    raise AssertionError("no loopback address with ports 8081 and 9644 free")


def get(url: str) -> tuple[int, Any]:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, json.loads(r.read())


@pytest.fixture
def defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[HostNode]]:
    """Nodes started with the listeners' defaults (conftest turns them off for the rest)."""
    monkeypatch.delenv("EDDY_REGISTRY_LISTENER", raising=False)
    monkeypatch.delenv("EDDY_ADMIN_LISTENER", raising=False)
    nodes: list[HostNode] = []
    yield nodes
    for n in nodes:
        n.kill()


def test_a_node_serves_the_registry_and_admin_listener_on_their_usual_ports(
        defaults: list[HostNode], tmp_path: Path) -> None:
    host = _free_host()
    first = HostNode(tmp_path / "first", host)
    defaults.append(first)
    first.start(timeout=60)
    assert first.proc is not None and first.proc.stdout is not None
    lines = [first.proc.stdout.readline().strip() for _ in range(2)]
    assert lines == [f"EDDY_ADMIN url=http://{host}:{ADMIN_PORT}",
                     f"EDDY_REGISTRY url=http://{host}:{REGISTRY_PORT}"]
    registry = f"http://{host}:{REGISTRY_PORT}"
    assert get(f"{registry}/") == (200, {})
    assert get(f"{registry}/subjects") == (200, [])  # a node alone: ready once it starts
    assert get(f"http://{host}:{ADMIN_PORT}/health/live")[0] == 200

    # a second node on the same host: the ports are taken, it goes on without them
    second = HostNode(tmp_path / "second", host)
    defaults.append(second)
    second.start(timeout=60)
    logs = second.logs()
    assert f"schema registry not started: {host}:{REGISTRY_PORT}" in logs, logs
    assert f"admin listener not started: {host}:{ADMIN_PORT}" in logs, logs
    process = second.proc
    assert process is not None and process.stdout is not None
    assert second.stop() == 0
    rest = process.stdout.read()  # all it printed after EDDY_READY
    assert "EDDY_REGISTRY" not in rest and "EDDY_ADMIN" not in rest
    # the first one did not notice
    assert get(f"{registry}/subjects") == (200, [])


def test_an_empty_setting_turns_each_off(defaults: list[HostNode], tmp_path: Path) -> None:
    assert load_config(env={}, overrides={"registry.listener": "", "admin.listener": ""}
                       ).registry_address is None
    host = _free_host()
    node = HostNode(tmp_path / "off", host, "--set", "registry.listener=",
                    "--set", "admin.listener=")
    defaults.append(node)
    node.start(timeout=60)
    process = node.proc
    assert process is not None and process.stdout is not None
    assert node.stop() == 0
    assert process.stdout.read() == ""
    assert "not started" not in node.logs()
    for port in (REGISTRY_PORT, ADMIN_PORT):  # nothing bound there
        with socket.socket() as s:
            s.bind((host, port))


def test_the_defaults_follow_the_kafka_listener() -> None:
    config = load_config(env={}, overrides={"listen": "127.0.0.7:9092"})
    assert config.registry_address == ("127.0.0.7", REGISTRY_PORT)
    assert config.admin_address == ("127.0.0.7", ADMIN_PORT)
    moved = load_config(env={}, overrides={"listen": "127.0.0.7:9092",
                                            "registry.listener": "127.0.0.1:0"})
    assert moved.registry_address == ("127.0.0.1", 0)

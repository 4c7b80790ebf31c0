"""Nodes with mesh.mdns.enable and no seeds find each other on the LAN (here: loopback)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from conftest import EddyProcess
from mesh_cluster import free_udp_port, states, wait_for

# mDNS's one multicast port on this host: not beside the other mDNS tests (scripts/test runs
# the suite in parallel)
pytestmark = pytest.mark.xdist_group("mdns")


def test_three_nodes_without_seeds_join_by_mdns_and_ignore_another_cluster(
        tmp_path: Path) -> None:
    cluster = f"t{uuid.uuid4().hex[:12]}"  # parallel runs on one machine stay apart
    nodes = [EddyProcess(tmp_path / f"n{i}", [
        "--node-id", str(i), "--set", f"mesh.listener=127.0.0.1:{free_udp_port()}",
        "--set", "mesh.mdns.enable=true",
        "--set", f"mesh.mdns.cluster={cluster if i < 4 else cluster + 'x'}",
        "--set", "mesh.ping.interval.ms=200"]) for i in range(1, 5)]
    try:
        for n in nodes:
            n.start()
        ours = {n.node_key for n in nodes[:3]}
        wait_for(lambda: all(set(states(n)) == ours and set(states(n).values()) == {"alive"}
                             for n in nodes[:3]), 60, "the three nodes see each other")
        assert set(states(nodes[3])) == {nodes[3].node_key}  # the other cluster: alone
    finally:
        for n in nodes:
            n.kill()

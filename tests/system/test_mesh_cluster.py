"""Five `eddy serve` processes on loopback join the mesh through one seed; a node killed
with SIGKILL is marked dead everywhere, and comes back with the same NodeId; a node whose
key is not allowed is refused by all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import EddyProcess
from mesh_cluster import OPERATOR, free_udp_port, mesh_status, states, wait_for

from eddy.mesh.identity import NodeIdentity, to_base32

PING_MS = 200
UNACKED = 3
#: a dead peer is declared after UNACKED pings at PING_MS; allow generous slack for a
#: loaded CI machine (the mesh's own timing is measured by bench/, not asserted here)
DEAD_WITHIN_S = 20.0


def node(tmp: Path, i: int, mesh_port: int, seed: int, allowed: str, *extra: str
         ) -> EddyProcess:
    args = ["--node-id", str(i),
            "--set", f"mesh.listener=127.0.0.1:{mesh_port}",
            "--set", f"mesh.seeds=127.0.0.1:{seed}",
            "--set", f"mesh.ping.interval.ms={PING_MS}",
            "--set", f"mesh.ping.max.unacked={UNACKED}",
            "--set", f"mesh.allowed.nodes={allowed}", *extra]
    return EddyProcess(tmp / f"n{i}", args)


def test_five_nodes_join_detect_a_kill_and_refuse_an_unlisted_key(tmp_path: Path) -> None:
    keys = {i: NodeIdentity.load_or_create(tmp_path / f"n{i}").node_id.hex()
            for i in range(1, 6)}
    operator = NodeIdentity.load_or_create(tmp_path / "operator").node_id.hex()
    OPERATOR["EDDY_MESH_IDENTITY"] = str(tmp_path / "operator")
    allowed = ",".join([*keys.values(), operator])
    ports = {i: free_udp_port() for i in range(1, 6)}
    nodes = {i: node(tmp_path, i, ports[i], ports[1], allowed) for i in range(1, 6)}
    impostor: EddyProcess | None = None
    try:
        for n in nodes.values():
            n.start()
        assert {n.node_key for n in nodes.values()} == set(keys.values())

        def all_alive() -> bool:
            return all(states(n) == dict.fromkeys(keys.values(), "alive")
                       for n in nodes.values())

        wait_for(all_alive, 60, "every node sees all five alive")
        status = mesh_status(nodes[2])
        by_key = {x["node_key"]: x for x in status["nodes"]}
        assert by_key[keys[4]]["node_id"] == 4
        assert by_key[keys[4]]["mesh"] == f"127.0.0.1:{ports[4]}"
        assert by_key[keys[4]]["kafka"] == nodes[4].bootstrap
        assert by_key[keys[4]]["roles"] == ["broker", "registry"]
        assert status["active_view"], "gossip keeps an active view"
        for target in ("4", to_base32(bytes.fromhex(keys[4]))):
            ping = subprocess.run(
                [sys.executable, "-m", "eddy", "cluster", "ping", target, "--mesh",
                 nodes[1].mesh, "-c", "3", "--interval-ms", "10", "--output", "json"],
                capture_output=True, text=True, timeout=60, env={**os.environ, **OPERATOR})
            assert ping.returncode == 0, ping.stderr
            answer = json.loads(ping.stdout)
            assert answer["target"] == keys[4] and answer["error"] is None
            assert len(answer["rtt_ms"]) == 3 and all(r > 0 for r in answer["rtt_ms"])
        unknown = subprocess.run(
            [sys.executable, "-m", "eddy", "cluster", "ping", "77", "--mesh", nodes[1].mesh],
            capture_output=True, text=True, timeout=60, env={**os.environ, **OPERATOR})
        assert unknown.returncode == 1 and "no node '77'" in unknown.stderr
        # plain `eddy cluster status -b` finds the mesh through the node's broker configs
        out = subprocess.run(
            [sys.executable, "-m", "eddy", "cluster", "status", "-b", nodes[5].bootstrap,
             "--output", "json"], capture_output=True, text=True, timeout=60,
            env={**os.environ, **OPERATOR})
        assert out.returncode == 0, out.stderr
        both = json.loads(out.stdout)
        assert both["brokers"] == [{"id": 5, "host": "127.0.0.1", "port": nodes[5].port}]
        assert {n["node_key"]: n["state"] for n in both["nodes"]} == dict.fromkeys(
            keys.values(), "alive")

        nodes[3].kill()
        others = [n for i, n in nodes.items() if i != 3]
        wait_for(lambda: all(states(n)[keys[3]] == "dead" for n in others), DEAD_WITHIN_S,
                 "node 3 marked dead by every other node")

        # a different key on node 3's address, not in the allow-list: refused by everyone
        impostor = node(tmp_path, 33, ports[3], ports[1], allowed)
        impostor.start()
        bad = impostor.node_key
        assert bad not in keys.values()
        bad_short = to_base32(bytes.fromhex(bad))[:10]
        for n in others:
            assert bad not in states(n)
        impostor.kill()
        impostor = None

        nodes[3].start()  # same data dir: same key
        assert nodes[3].node_key == keys[3]
        wait_for(lambda: all(states(n)[keys[3]] == "alive" for n in nodes.values()), 60,
                 "node 3 back and alive everywhere with its NodeId")
        for n in nodes.values():
            assert bad not in states(n)
        logs = "".join((tmp_path / f"n{i}.log").read_text() for i in (1, 2, 4, 5))
        assert f"node {bad_short} is not in the allow-list" in logs
    finally:
        if impostor is not None:
            impostor.kill()
        for n in nodes.values():
            n.kill()
        OPERATOR.clear()

"""Admission to the mesh by the cluster's key (issue 16), with real `eddy serve` processes:
two nodes holding tokens signed by the cluster key join each other; a node without a token
and one with a token from another key are refused, never appear in the members' view, and
the members keep working. The keys and tokens are made with the CLI (`eddy mesh keygen`,
`eddy mesh sign`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import EddyProcess
from mesh_cluster import OPERATOR, free_udp_port, states, wait_for

from eddy.mesh.identity import short

#: `eddy mesh ...` (the command group of eddy.cli.mesh_keys)
MESH_CLI = [sys.executable, "-m", "eddy", "mesh"]


def mesh_cli(*args: str) -> str:
    out = subprocess.run([*MESH_CLI, *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def node(tmp: Path, i: int, port: int, seed: int, *settings: str) -> EddyProcess:
    args = ["--node-id", str(i), "--set", f"mesh.listener=127.0.0.1:{port}",
            "--set", f"mesh.seeds=127.0.0.1:{seed}", "--set", "mesh.ping.interval.ms=200"]
    for s in settings:
        args += ["--set", s]
    return EddyProcess(tmp / f"n{i}", args)


def test_members_join_and_others_are_refused(tmp_path: Path) -> None:
    public = mesh_cli("keygen", "--out", str(tmp_path / "cluster.key")).strip()
    mesh_cli("keygen", "--out", str(tmp_path / "other.key"))
    for d in ("n1", "n2", "operator"):
        mesh_cli("sign", "--cluster-key", str(tmp_path / "cluster.key"),
                 "--data-dir", str(tmp_path / d), "--expires", "1d")
    # node 4 presents a token for its own NodeId, but signed by another cluster's key
    mesh_cli("sign", "--cluster-key", str(tmp_path / "other.key"),
             "--data-dir", str(tmp_path / "n4"))
    OPERATOR["EDDY_MESH_IDENTITY"] = str(tmp_path / "operator")  # the tools' token
    ports = {i: free_udp_port() for i in range(1, 5)}
    key_setting = f"mesh.cluster.public.key={public}"
    members = [node(tmp_path, 1, ports[1], ports[1], key_setting),
               node(tmp_path, 2, ports[2], ports[1],
                    f"mesh.cluster.public.key={tmp_path / 'cluster.key.pub'}")]
    outsiders = [node(tmp_path, 3, ports[3], ports[1], key_setting),  # no token
                 node(tmp_path, 4, ports[4], ports[2])]  # the other key's token
    try:
        for n in members:
            n.start()
        keys = {n.node_key for n in members}
        wait_for(lambda: all(states(n) == dict.fromkeys(keys, "alive") for n in members), 60,
                 "the two members see each other alive")
        for n in outsiders:
            n.start()
        logs = {
            3: f"node {short(bytes.fromhex(outsiders[0].node_key))} has no valid membership "
               "token: no membership token",
            4: f"node {short(bytes.fromhex(outsiders[1].node_key))} has no valid membership "
               "token: membership token is not signed by the cluster key",
        }
        wait_for(lambda: logs[3] in members[0].logs() and logs[4] in members[1].logs(), 60,
                 "the members refuse the outsiders (their logs say why)")
        for n in members:
            assert states(n) == dict.fromkeys(keys, "alive")
            assert "BEGIN" not in n.logs() and "PRIVATE" not in n.logs()
        for n in outsiders:
            assert n.alive()
            assert set(states(n)) == {n.node_key}  # refused: alone
        ping = subprocess.run(
            [sys.executable, "-m", "eddy", "cluster", "ping", "2", "--mesh", members[0].mesh,
             "-c", "2", "--interval-ms", "10", "--output", "json"],
            capture_output=True, text=True, timeout=60, env={**os.environ, **OPERATOR})
        assert ping.returncode == 0, ping.stderr
        answer = json.loads(ping.stdout)
        assert answer["error"] is None and len(answer["rtt_ms"]) == 2
        # a tool without a token is refused like any other node
        anonymous = subprocess.run(
            [sys.executable, "-m", "eddy", "cluster", "status", "--mesh", members[0].mesh,
             "--output", "json"], capture_output=True, text=True, timeout=60,
            env={k: v for k, v in os.environ.items() if k != "EDDY_MESH_IDENTITY"})
        assert anonymous.returncode == 1
        assert "membership token" in anonymous.stderr
    finally:
        for n in [*members, *outsiders]:
            n.kill()
        OPERATOR.clear()

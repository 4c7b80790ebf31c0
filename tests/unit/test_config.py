"""Config layering and errors that name the source and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from eddy.config import ConfigError, load_config


def test_defaults() -> None:
    cfg = load_config(env={})
    assert cfg.listen_address == ("127.0.0.1", 9092)
    assert cfg.advertised_address == ("127.0.0.1", 9092)
    assert cfg.data_dir == "./eddy-data"
    assert cfg.num_partitions == 1
    assert cfg.auto_create_topics_enable is True


def test_layers_file_env_flags(tmp_path: Path) -> None:
    f = tmp_path / "eddy.yaml"
    f.write_text("num.partitions: 4\nlisten: 127.0.0.1:9000\nnode_id: 3\n")
    cfg = load_config(str(f), env={"EDDY_NUM_PARTITIONS": "6"}, overrides={"node_id": 7})
    assert cfg.num_partitions == 6  # env beats file
    assert cfg.node_id == 7  # flags beat everything
    assert cfg.listen_address == ("127.0.0.1", 9000)


def test_wildcard_listen_advertises_loopback() -> None:
    cfg = load_config(env={}, overrides={"listen": "0.0.0.0:9999"})
    assert cfg.advertised_address == ("127.0.0.1", 9999)


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"num.partitions": "0"}, "num.partitions"),
        ({"listen": "nope"}, "listen"),
        ({"no.such.setting": "1"}, "no.such.setting"),
        ({"log.message.timestamp.type": "Sometimes"}, "message.timestamp.type"),
    ],
)
def test_bad_values_name_the_field(overrides: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(env={}, overrides=overrides).topic_defaults()
    assert needle in str(exc.value)


def test_bad_env_names_the_source() -> None:
    with pytest.raises(ConfigError, match=r"environment.*num\.partitions"):
        load_config(env={"EDDY_NUM_PARTITIONS": "many"})


def test_bad_file(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml"):
        load_config(str(f), env={})
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(str(tmp_path / "missing.yaml"), env={})


def test_mesh_and_role_settings_are_checked_where_they_are_read() -> None:
    cfg = load_config(env={}, overrides={"process.roles": " gateway , broker",
                                         "mesh.seeds": "127.0.0.1:9093, [::1]:9094",
                                         "mesh.allowed.nodes": "ab" * 32})
    assert cfg.roles == {"gateway", "broker"} and cfg.mesh_enabled
    assert cfg.mesh_seed_addresses == [("127.0.0.1", 9093), ("::1", 9094)]
    lone = load_config(env={})  # a cluster of one: its quorum rides the mesh, on loopback
    assert lone.mesh_enabled and lone.mesh_address == ("127.0.0.1", 0)
    assert not load_config(env={}, overrides={"process.roles": "broker"}).mesh_enabled
    assert load_config(env={}, overrides={"mesh.listener": "127.0.0.1:0"}).mesh_enabled
    for bad, field in [({"process.roles": "broker,wizard"}, "process.roles"),
                       ({"process.roles": ""}, "process.roles"),
                       ({"mesh.seeds": "nohost"}, "mesh.seeds"),
                       ({"mesh.allowed.nodes": "xyz"}, "mesh.allowed.nodes")]:
        with pytest.raises(ConfigError, match=field):
            load_config(env={}, overrides=bad)


def test_quorum_voters_decide_the_mesh_address_the_seeds_and_the_controller_role() -> None:
    voters = "1@127.0.0.1:9201, 2@127.0.0.1:9202,3@[::1]:9203"
    cfg = load_config(env={}, overrides={"node_id": 2, "process.roles": "broker,controller",
                                         "controller.quorum.voters": voters})
    assert cfg.clustered and cfg.mesh_enabled
    assert cfg.quorum_voters == {1: "127.0.0.1:9201", 2: "127.0.0.1:9202", 3: "[::1]:9203"}
    assert cfg.mesh_address == ("127.0.0.1", 9202)  # its own voter address
    assert cfg.mesh_seed_addresses == [("127.0.0.1", 9201), ("::1", 9203)]
    broker = load_config(env={}, overrides={"node_id": 7, "controller.quorum.voters": voters})
    assert broker.mesh_address == ("127.0.0.1", 0) and not broker.roles & {"controller"}
    # unset, process.roles is what the node's place asks for
    assert load_config(env={}, overrides={"node_id": 2, "controller.quorum.voters": voters}
                       ).roles == {"broker", "controller", "registry"}
    assert load_config(env={}).roles == {"broker", "controller", "registry"}  # cluster of one
    assert load_config(env={}).quorum_voters == {1: "127.0.0.1:0"}
    for mesh in ({"mesh.listener": "127.0.0.1:0"}, {"mesh.seeds": "127.0.0.1:9"},
                 {"mesh.mdns.enable": True}):  # a mesh of nodes of their own
        assert load_config(env={}, overrides=mesh).roles == {"broker", "registry"}
    assert not load_config(env={}, overrides={"process.roles": "broker"}).clustered
    for bad, needle in [
        ({"node_id": 2, "process.roles": "broker", "controller.quorum.voters": voters},
         "add controller"),
        ({"node_id": 9, "process.roles": "broker,controller",
          "controller.quorum.voters": voters}, "not in controller.quorum.voters"),
        ({"controller.quorum.voters": "1@127.0.0.1:1,1@127.0.0.1:2"}, "named twice"),
        ({"controller.quorum.voters": "x@127.0.0.1:1"}, "ID@HOST:PORT"),
        ({"controller.quorum.voters": "0@127.0.0.1:1"}, "ID@HOST:PORT"),
        ({"controller.quorum.voters": "1@nohost"}, "controller.quorum.voters"),
        ({"broker.heartbeat.interval.ms": 2000, "broker.session.timeout.ms": 1500},
         "must be above"),
        ({"raft.heartbeat.interval.ms": 500, "raft.election.timeout.ms": 400},
         "raft.election.timeout.ms must be above"),
        ({"node_id": 1, "process.roles": "controller", "controller.quorum.voters": voters},
         "needs broker or gateway"),
        ({"node_id": 7, "process.roles": "broker,gateway", "controller.quorum.voters": voters},
         "gateways route"),
    ]:
        with pytest.raises(ConfigError, match=needle):
            load_config(env={}, overrides=bad)


def test_the_registry_is_a_role_of_broker_nodes() -> None:
    assert load_config(env={}).registry_address == ("127.0.0.1", 8081)  # every role: default
    explicit = load_config(env={}, overrides={"process.roles": "broker,controller"})
    assert "registry" not in explicit.roles and explicit.registry_address is None
    named = load_config(env={}, overrides={"process.roles": "broker,registry"})
    assert named.registry_address == ("127.0.0.1", 8081)
    # a registry.listener set asks for the registry: the role follows
    listed = load_config(env={}, overrides={"process.roles": "broker",
                                            "registry.listener": "127.0.0.1:0"})
    assert "registry" in listed.roles and listed.registry_address == ("127.0.0.1", 0)
    off = load_config(env={}, overrides={"registry.listener": ""})
    assert off.registry_address is None
    with pytest.raises(ConfigError, match="registry needs broker"):
        load_config(env={}, overrides={"process.roles": "gateway,registry"})

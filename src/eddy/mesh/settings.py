"""The mesh settings of a node (mesh.*): where its QUIC mesh listens, whom it joins
through, who may join, how peers are watched. ``BrokerConfig`` inherits them; what needs
other groups too (is the mesh on, its seeds with the quorum's voters) is in eddy.config."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from eddy.config_parse import parse_host_port, split_list

__all__ = ["MeshNode", "MeshSettings"]


class MeshSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    mesh_listener: str | None = Field(
        None, alias="mesh.listener",
        description="HOST:PORT (UDP) of the node mesh (QUIC); unset: no mesh unless "
        "mesh.seeds is set or the node is a gateway, then 127.0.0.1:0",
    )
    mesh_advertised: str | None = Field(
        None, alias="mesh.advertised.listener",
        description="HOST:PORT other nodes dial for the mesh (default: mesh.listener)",
    )
    mesh_seeds: str = Field(
        "", alias="mesh.seeds", description="HOST:PORT list of mesh addresses to join through"
    )
    mesh_allowed_nodes: str = Field(
        "", alias="mesh.allowed.nodes",
        description="comma-separated NodeIds (hex or base32) allowed on the mesh; empty: any "
        "(unless mesh.cluster.public.key is set)",
    )
    mesh_cluster_public_key: str = Field(
        "", alias="mesh.cluster.public.key",
        description="the cluster's Ed25519 public key (64 hex digits, base64, or a PEM file "
        "path; `eddy mesh keygen`): when set, a peer is admitted if it is on "
        "mesh.allowed.nodes or presents a membership token for its NodeId signed by this key "
        "(`eddy mesh sign`) and not expired; empty: the allow-list alone decides",
    )
    mesh_membership_file: str | None = Field(
        None, alias="mesh.membership.file",
        description="this node's membership token (`eddy mesh sign`), shown to peers in its "
        "mesh certificate; default <data_dir>/node.membership when that file exists",
    )
    mesh_mdns_enable: bool = Field(
        False, alias="mesh.mdns.enable",
        description="find peers on the LAN by mDNS (zeroconf) besides mesh.seeds",
    )
    mesh_mdns_cluster: str = Field(
        "", alias="mesh.mdns.cluster",
        description="with mDNS, join only nodes that announce the same name",
    )
    mesh_ping_interval_ms: int = Field(
        500, ge=10, alias="mesh.ping.interval.ms",
        description="how often every known peer is PINGed (seed 002)",
    )
    mesh_ping_max_unacked: int = Field(
        4, ge=1, alias="mesh.ping.max.unacked",
        description="a peer that leaves this many PINGs in a row unanswered is dead (seed "
        "002's MAX_PING_UNACKED): with the interval, 2 s by default",
    )
    mesh_request_timeout_ms: int = Field(
        30000, ge=1, alias="mesh.request.timeout.ms",
        description="default timeout of a forwarded operation over the mesh",
    )

    @field_validator("mesh_listener", "mesh_advertised")
    @classmethod
    def _mesh_host_port(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None:
            parse_host_port(v, str(info.field_name))
        return v

    @field_validator("mesh_seeds")
    @classmethod
    def _seeds(cls, v: str) -> str:
        for item in split_list(v):
            parse_host_port(item, "mesh.seeds")
        return v

    @field_validator("mesh_allowed_nodes")
    @classmethod
    def _allowed(cls, v: str) -> str:
        from eddy.mesh.identity import IdentityError, parse_node_id

        for item in split_list(v):
            try:
                parse_node_id(item)
            except IdentityError as exc:
                raise ValueError(f"{item!r}: {exc}") from None
        return v

    @field_validator("mesh_cluster_public_key")
    @classmethod
    def _cluster_key(cls, v: str) -> str:
        from eddy.mesh.membership import MembershipError, parse_public_key

        if v.strip():
            try:
                parse_public_key(v)
            except MembershipError as exc:
                raise ValueError(str(exc)) from None
        return v

    @field_validator("mesh_membership_file")
    @classmethod
    def _membership_file(cls, v: str | None) -> str | None:
        from eddy.mesh.membership import MembershipError, read_token_file

        if v is not None and v.strip():
            try:
                read_token_file(Path(v.strip()))
            except MembershipError as exc:
                raise ValueError(str(exc)) from None
        return v


class NodeIdentity(Protocol):
    """Who a node is, as the services of every layer read it: its id, roles, rack and data
    dir (``eddy.broker.settings.BrokerSettings`` has them)."""

    @property
    def node_id(self) -> int: ...

    @property
    def roles(self) -> frozenset[str]: ...

    @property
    def broker_rack(self) -> str | None: ...

    @property
    def data_dir(self) -> str: ...


class MeshNode(NodeIdentity, Protocol):
    """What the mesh service reads of its node's settings: who the node is (id, roles, rack,
    data dir), where its mesh listens and whom it joins, and the mesh.* settings. The node's
    settings (``eddy.broker.settings.BrokerSettings``) have them all; the mesh does not
    import them."""

    @property
    def mesh_address(self) -> tuple[str, int]: ...

    @property
    def mesh_seed_addresses(self) -> list[tuple[str, int]]: ...

    @property
    def mesh_advertised(self) -> str | None: ...

    @property
    def mesh_allowed_nodes(self) -> str: ...

    @property
    def mesh_cluster_public_key(self) -> str: ...

    @property
    def mesh_membership_file(self) -> str | None: ...

    @property
    def mesh_mdns_enable(self) -> bool: ...

    @property
    def mesh_mdns_cluster(self) -> str: ...

    @property
    def mesh_ping_interval_ms(self) -> int: ...

    @property
    def mesh_ping_max_unacked(self) -> int: ...

"""DescribeQuorum (API 55, KIP-595/KIP-853): the ``metadata`` Raft group as Kafka's
``__cluster_metadata`` partition: its leader, term (as the leader epoch), commit index (as
the high watermark) and each voter's and observer's log end as the leader sees them. Any
node answers: it asks the metadata leader. DESCRIBE on the cluster, else
CLUSTER_AUTHORIZATION_FAILED (as Kafka)."""

from __future__ import annotations

import uuid
from typing import Any

from eddy.broker.broker import Broker
from eddy.broker.handlers.cluster_metadata import CONTROLLER_WAIT_S, host_port
from eddy.broker.handlers.topic_results import CLUSTER_DENIED
from eddy.cluster.controller.client import ControllerUnavailable
from eddy.cluster.controller.rpc import QuorumRequest, ReplicaProgress, error_of
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode
from eddy.security.acl import AclOperation
from eddy.security.checks import cluster_allowed

METADATA_TOPIC = "__cluster_metadata"
NO_DIRECTORY = uuid.UUID(int=0)


def _response(mod: Any, code: ErrorCode, message: str | None, topics: tuple[Any, ...] = (),
              nodes: tuple[Any, ...] = ()) -> Any:
    return build(mod.DescribeQuorumResponse, error_code=code, error_message=message,
                 topics=topics, nodes=nodes)


def _replica(mod: Any, r: ReplicaProgress) -> Any:
    return build(mod.ReplicaState, replica_id=r.node_id, replica_directory_id=NO_DIRECTORY,
                 log_end_offset=r.log_end, last_fetch_timestamp=-1,
                 last_caught_up_timestamp=-1)


async def describe_quorum(broker: Broker, req: Request) -> Any:
    mod = response_module(ApiKey.DESCRIBE_QUORUM, req.api_version)
    if not cluster_allowed(broker, req, AclOperation.DESCRIBE):
        return _response(mod, ErrorCode.cluster_authorization_failed, CLUSTER_DENIED)
    cluster = broker.cluster
    if cluster is None:
        return _response(mod, ErrorCode.invalid_request,
                         "this node runs no metadata quorum (controller.quorum.voters is "
                         "not set)")
    asked = [(t.topic_name, p.partition_index) for t in req.body.topics for p in t.partitions]
    if asked != [(METADATA_TOPIC, 0)]:
        return _response(mod, ErrorCode.invalid_request,
                         f"describe {METADATA_TOPIC} partition 0, and only it (asked {asked})")
    try:
        answer = await cluster.ask(QuorumRequest(), CONTROLLER_WAIT_S)
    except ControllerUnavailable as exc:
        return _response(mod, ErrorCode.request_timed_out, str(exc))
    q = answer.quorum
    if answer.error_code != ErrorCode.none or q is None:
        return _response(mod, error_of(answer) or ErrorCode.not_controller,
                         answer.message)
    part = build(mod.PartitionData, partition_index=0, error_code=ErrorCode.none,
                 error_message=None, leader_id=q.leader, leader_epoch=q.term,
                 high_watermark=q.high_watermark,
                 current_voters=tuple(_replica(mod, r) for r in q.voters),
                 observers=tuple(_replica(mod, r) for r in q.observers))
    topic = build(mod.TopicData, topic_name=METADATA_TOPIC, partitions=(part,))
    nodes: tuple[Any, ...] = ()
    if hasattr(mod, "Node"):
        nodes = tuple(
            build(mod.Node, node_id=node_id, listeners=(
                build(mod.Listener, name="CONTROLLER", host=host_port(addr)[0],
                      port=host_port(addr)[1]),))
            for node_id, addr in sorted(cluster.voters.items()))
    return _response(mod, ErrorCode.none, None, (topic,), nodes)

"""The KafkaOp carrier over the mesh: the forwarder's side and the owner's side."""

from __future__ import annotations

import asyncio

import pytest

from eddy import postcard
from eddy.gateway.mesh_link import KafkaOpServer, MeshForwarder
from eddy.gateway.ops import OpFailed, OpTimeout, OpUnavailable, UnknownOp
from eddy.mesh.directory import Directory, NodeInfo
from eddy.mesh.frames import TAG_KAFKA_OP, Frame, KafkaOpRequest, KafkaOpResponse


def info(n: int) -> NodeInfo:
    return NodeInfo(key=bytes([n]) * 32, kafka_node_id=n, roles=("broker",),
                    mesh_addr=f"127.0.0.1:{9000 + n}", kafka_addr="127.0.0.1:1", rack=None,
                    version="t")


class Executor:
    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour

    async def execute(self, op: int, body: bytes) -> bytes:
        if self.behaviour == "slow":
            await asyncio.sleep(10)
        if self.behaviour == "unknown":
            raise UnknownOp(op)
        if self.behaviour == "crash":
            raise RuntimeError("boom")
        return bytes([op]) + body


class Wire:
    """The mesh between the forwarder and an owner running KafkaOpServer."""

    def __init__(self, server: KafkaOpServer) -> None:
        self.server = server
        self.calls = 0

    async def call(self, peer: bytes, tag: int, payload: bytes, timeout_s: float) -> bytes:
        assert tag == TAG_KAFKA_OP and peer == info(2).key
        self.calls += 1
        answer = await self.server.handle(peer, Frame(tag, None, payload))
        if answer is None:
            raise ConnectionResetError("reset")
        return answer


class Unreachable(Exception):
    pass


def forwarder(behaviour: str, local: Executor | None = None) -> tuple[MeshForwarder, Wire]:
    d = Directory(info(1))
    d.hello(info(2), 0)
    wire = Wire(KafkaOpServer(Executor(behaviour)))  # type: ignore[arg-type]
    fwd = MeshForwarder(wire, d, local,  # type: ignore[arg-type]
                        timeout_errors=(TimeoutError,),
                        unavailable_errors=(Unreachable, ConnectionResetError))
    return fwd, wire


def test_an_op_runs_on_its_owner_and_comes_back() -> None:
    fwd, wire = forwarder("ok")
    assert asyncio.run(fwd.call(2, 0x02, b"xyz", 1000)) == b"\x02xyz"
    assert wire.calls == 1 and wire.server.served == 1


def test_the_local_node_runs_its_own_ops_without_the_mesh() -> None:
    fwd, wire = forwarder("ok", local=Executor("ok"))
    assert asyncio.run(fwd.call(1, 0x06, b"j", 1000)) == b"\x06j"
    assert wire.calls == 0


@pytest.mark.parametrize(("behaviour", "error", "message"), [
    ("unknown", OpFailed, "unknown op 0x03"),
    ("crash", OpFailed, "RuntimeError: boom"),
    ("slow", OpTimeout, "timed out after 50 ms"),
])
def test_owner_failures_reach_the_caller_named(behaviour: str, error: type[Exception],
                                                message: str) -> None:
    fwd, _ = forwarder(behaviour)
    with pytest.raises(error, match=message):
        asyncio.run(fwd.call(2, 0x03, b"", 50))


def test_an_unknown_or_dead_node_is_unavailable() -> None:
    fwd, _ = forwarder("ok")
    with pytest.raises(OpUnavailable, match="node 7"):
        asyncio.run(fwd.call(7, 0x02, b"", 1000))


def test_a_malformed_request_is_dropped_and_a_mismatched_answer_refused() -> None:
    server = KafkaOpServer(Executor("ok"))  # type: ignore[arg-type]
    assert asyncio.run(server.handle(b"p" * 32, Frame(TAG_KAFKA_OP, None, b"\xff"))) is None

    class Liar:
        async def call(self, peer: bytes, tag: int, payload: bytes, timeout_s: float) -> bytes:
            req = postcard.decode(KafkaOpRequest, payload)
            return postcard.encode(KafkaOpResponse(correlation_id=req.correlation_id + 1,
                                                   op=req.op, status=0, body=b"", message=""))

    d = Directory(info(1))
    d.hello(info(2), 0)
    fwd = MeshForwarder(Liar(), d, None, timeout_errors=(TimeoutError,),
                        unavailable_errors=(Unreachable,))
    with pytest.raises(OpFailed, match="answered another op"):
        asyncio.run(fwd.call(2, 0x02, b"", 1000))


def test_a_node_without_the_broker_role_answers_failed() -> None:
    server = KafkaOpServer(None)
    req = postcard.encode(KafkaOpRequest(correlation_id=5, op=2, org_id=0, timeout_ms=10,
                                         body=b""))
    raw = asyncio.run(server.handle(b"p" * 32, Frame(TAG_KAFKA_OP, None, req)))
    assert raw is not None
    answer = postcard.decode(KafkaOpResponse, raw)
    assert answer.correlation_id == 5 and answer.status != 0
    assert "no broker role" in answer.message

"""A gateway's ACL decisions asked of a broker (tag 0x0A): the frames and their bounds, the
broker's server (gateways only, its authorizer's decisions), the mesh source, the
gateway's cache (one second at most, bounded) and the gateway's per-request Gate."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from eddy import postcard
from eddy.gateway.authz import Gate, unknown_topic_codes
from eddy.gateway.mesh_link import KafkaOpServer
from eddy.mesh.directory import DEAD, Directory, NodeInfo
from eddy.mesh.frames import (
    AUTHORIZE_ANY,
    AUTHORIZE_RESOURCE,
    TAG_AUTHORIZE,
    TAG_CREDENTIALS,
    TAG_KAFKA_OP_AS,
    AuthorizeAnswer,
    AuthorizeCheck,
    AuthorizeRequest,
    Frame,
    tag_class,
)
from eddy.metadata.records import AclBinding
from eddy.protocol.codec import Request
from eddy.protocol.errors import ErrorCode
from eddy.security.acl import (
    CLUSTER_NAME,
    AclOperation,
    PatternType,
    Permission,
    ResourceType,
)
from eddy.security.authorizer import Authorizer
from eddy.security.remote_authorizer import (
    MAX_CHECKS,
    AuthorizationError,
    AuthorizationServer,
    AuthorizationUnavailable,
    LocalDecisions,
    MeshAuthorizationSource,
    RemoteAuthorizer,
    any_check,
    check_answer,
    check_request,
    resource_check,
)
from eddy.security.session import Session

ALICE, HOST = "User:alice", "10.0.0.7"
READ, WRITE, DESCRIBE = AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER


def info(n: int, roles: tuple[str, ...]) -> NodeInfo:
    return NodeInfo(key=bytes([n]) * 32, kafka_node_id=n, roles=roles,
                    mesh_addr=f"127.0.0.1:{9000 + n}", kafka_addr="127.0.0.1:1", rack=None,
                    version="t")


def key(n: int) -> bytes:
    return info(n, ()).key


def directory() -> Directory:
    """Node 1 (this one, a broker); 2 a broker, 5 a gateway, 6 a dead gateway."""
    d = Directory(info(1, ("broker",)))
    d.hello(info(2, ("broker",)), 0)
    d.hello(info(5, ("gateway",)), 0)
    d.hello(info(6, ("gateway",)), 0)
    d.set_state(key(6), DEAD)
    return d


def acl(name: str, op: AclOperation, pattern: PatternType = PatternType.LITERAL,
        permission: Permission = Permission.ALLOW, principal: str = ALICE,
        rtype: ResourceType = TOPIC) -> AclBinding:
    return AclBinding(int(rtype), name, int(pattern), principal, "*", int(op),
                      int(permission))


class FakeBroker:
    def __init__(self, acls: list[AclBinding] | None) -> None:
        self.acls = acls or []
        self.version = 0
        self.authorizer: Authorizer | None = None if acls is None else Authorizer(
            lambda: (self, self.version, self.acls), frozenset({"User:admin"}))


# ---- the frames ------------------------------------------------------------------------------


def test_frames_round_trip_under_a_control_tag_of_their_own() -> None:
    request = AuthorizeRequest(ALICE, HOST, (resource_check(READ, TOPIC, "t"),
                                             any_check(WRITE, TOPIC)))
    for value in (request, AuthorizeAnswer(0, True, (True, False)),
                  AuthorizeAnswer(31, False, ())):
        assert postcard.decode(type(value), postcard.encode(value)) == value
    assert tag_class(TAG_AUTHORIZE) == "control"
    assert TAG_AUTHORIZE not in (TAG_CREDENTIALS, TAG_KAFKA_OP_AS)


@pytest.mark.parametrize("tp", [AuthorizeRequest, AuthorizeAnswer, AuthorizeCheck])
def test_hostile_bytes_are_postcard_errors(tp: Any) -> None:
    good = {AuthorizeRequest: AuthorizeRequest(ALICE, HOST, (resource_check(READ, TOPIC, "t"),)),
            AuthorizeAnswer: AuthorizeAnswer(0, True, (True, False, True)),
            AuthorizeCheck: resource_check(DESCRIBE, GROUP, "g")}[tp]
    data = postcard.encode(good)
    for bad in (data[:-1], data + b"\x00", b"\xff\xff\xff\xff\x0f" + data[1:],
                data[:1] + b"\xff\xff\xff\xff\x0f", b""):
        with pytest.raises(postcard.PostcardError):
            postcard.decode(tp, bad)
    # a count of a billion checks in a few bytes: refused before anything is allocated
    huge = postcard.encode(AuthorizeRequest(ALICE, HOST, ()))[:-1] + b"\x80\x94\xeb\xdc\x03"
    with pytest.raises(postcard.PostcardError):
        postcard.decode(AuthorizeRequest, huge)
    with pytest.raises(postcard.PostcardError):  # a bool that is neither 0 nor 1
        postcard.decode(AuthorizeAnswer, b"\x00\x01\x01\x02")


def test_requests_out_of_bounds_are_refused() -> None:
    check_request(AuthorizeRequest(ALICE, HOST, (resource_check(READ, TOPIC, "t" * 1024),)
                                   * MAX_CHECKS))
    ok = resource_check(READ, TOPIC, "t")
    for bad in (
        AuthorizeRequest(ALICE, HOST, ()),
        AuthorizeRequest(ALICE, HOST, (ok,) * (MAX_CHECKS + 1)),
        AuthorizeRequest("alice", HOST, (ok,)),
        AuthorizeRequest("User:" + "a" * 2000, HOST, (ok,)),
        AuthorizeRequest(ALICE, "h" * 256, (ok,)),
        AuthorizeRequest(ALICE, HOST, (resource_check(READ, TOPIC, "t" * 1025),)),
        AuthorizeRequest(ALICE, HOST, (AuthorizeCheck(2, 3, 2, "t"),)),
        AuthorizeRequest(ALICE, HOST, (AuthorizeCheck(AUTHORIZE_RESOURCE, 0, 2, "t"),)),
        AuthorizeRequest(ALICE, HOST, (AuthorizeCheck(AUTHORIZE_RESOURCE, 1, 2, "t"),)),
        AuthorizeRequest(ALICE, HOST, (AuthorizeCheck(AUTHORIZE_RESOURCE, 99, 2, "t"),)),
        AuthorizeRequest(ALICE, HOST, (AuthorizeCheck(AUTHORIZE_RESOURCE, 3, 1, "t"),)),
        AuthorizeRequest(ALICE, HOST, (AuthorizeCheck(AUTHORIZE_RESOURCE, 3, 200, "t"),)),
        AuthorizeRequest(ALICE, HOST, (AuthorizeCheck(AUTHORIZE_ANY, 3, 2, "t"),)),
    ):
        with pytest.raises(AuthorizationError):
            check_request(bad)


def test_answers_out_of_bounds_are_refused() -> None:
    assert check_answer(AuthorizeAnswer(0, True, (True, False)), 2) == [True, False]
    assert check_answer(AuthorizeAnswer(0, False, ()), 5) is None
    for bad, count in ((AuthorizeAnswer(0, True, (True,)), 2),
                       (AuthorizeAnswer(0, True, (True, True, True)), 2),
                       (AuthorizeAnswer(0, False, (True,)), 1),
                       (AuthorizeAnswer(31, False, ()), 1),
                       (AuthorizeAnswer(42, True, (True,)), 1)):
        with pytest.raises(AuthorizationError):
            check_answer(bad, count)


# ---- the broker's server ---------------------------------------------------------------------


def serve(server: AuthorizationServer, peer: bytes, payload: bytes) -> AuthorizeAnswer:
    out = asyncio.run(server.handle(peer, Frame(TAG_AUTHORIZE, None, payload)))
    assert out is not None
    answer: AuthorizeAnswer = postcard.decode(AuthorizeAnswer, out)
    return answer


def test_server_decides_for_live_gateways_only() -> None:
    broker = FakeBroker([acl("t", READ), acl("pre-", WRITE, PatternType.PREFIXED),
                         acl("g", DESCRIBE, rtype=GROUP)])
    server = AuthorizationServer(broker, KafkaOpServer(None, directory()).is_gateway)
    checks = (resource_check(READ, TOPIC, "t"), resource_check(DESCRIBE, TOPIC, "t"),
              resource_check(WRITE, TOPIC, "t"), resource_check(WRITE, TOPIC, "pre-x"),
              resource_check(DESCRIBE, GROUP, "g"), resource_check(READ, GROUP, "g"),
              any_check(WRITE, TOPIC), any_check(READ, GROUP),
              resource_check(DESCRIBE, CLUSTER, CLUSTER_NAME))
    payload = postcard.encode(AuthorizeRequest(ALICE, HOST, checks))
    assert serve(server, key(5), payload) == AuthorizeAnswer(
        0, True, (True, True, False, True, True, False, True, False, False))
    admin = postcard.encode(AuthorizeRequest("User:admin", HOST, checks))
    assert serve(server, key(5), admin).allowed == (True,) * len(checks)
    # a broker, a dead gateway, a stranger: refused, nothing decided
    for peer in (key(2), key(6), bytes([9]) * 32):
        assert serve(server, peer, payload) == AuthorizeAnswer(
            int(ErrorCode.cluster_authorization_failed), False, ())
    for bad in (b"\x05ali", payload[:-1], postcard.encode(AuthorizeRequest(ALICE, HOST, ())),
                postcard.encode(AuthorizeRequest("nobody", HOST, checks))):
        assert serve(server, key(5), bad).error_code == ErrorCode.invalid_request
    assert (server.served, server.refused) == (2, 3)
    # no authorizer on the broker: everything allowed, said once
    open_server = AuthorizationServer(FakeBroker(None), KafkaOpServer(None, directory()
                                                                      ).is_gateway)
    assert serve(open_server, key(5), payload) == AuthorizeAnswer(0, False, ())


class Mesh:
    """rpc.call to brokers by key: a server (called as gateway 5), an exception, or bytes."""

    def __init__(self, answers: dict[bytes, Any]) -> None:
        self.answers = answers
        self.asked: list[bytes] = []

    async def call(self, peer: bytes, tag: int, payload: bytes, timeout_s: float) -> bytes:
        assert tag == TAG_AUTHORIZE
        self.asked.append(peer)
        answer = self.answers[peer]
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, AuthorizationServer):
            out = await answer.handle(key(5), Frame(tag, None, payload))
            assert out is not None
            return out
        assert isinstance(answer, bytes)
        return answer


def test_mesh_source_asks_the_live_brokers_until_one_answers() -> None:
    d = Directory(info(5, ("gateway",)))
    for n in (1, 2, 3):
        d.hello(info(n, ("broker",)), 0)
    d.hello(info(4, ("gateway",)), 0)
    gateways = Directory(info(3, ("broker",)))
    gateways.hello(info(5, ("gateway",)), 0)
    server = AuthorizationServer(FakeBroker([acl("t", READ)]),
                                 KafkaOpServer(None, gateways).is_gateway)
    short = postcard.encode(AuthorizeAnswer(0, True, ()))
    mesh = Mesh({key(1): ConnectionError("down"), key(2): short, key(3): server})
    source = MeshAuthorizationSource(mesh, d)
    checks = [resource_check(READ, TOPIC, "t"), resource_check(READ, TOPIC, "u")]
    for _ in range(5):  # in random order: whoever fails, the next is asked
        assert asyncio.run(source.ask(ALICE, HOST, checks)) == [True, False]
        assert mesh.asked[-1] == key(3)
    assert set(mesh.asked) <= {key(1), key(2), key(3)}  # never a gateway
    mesh.answers[key(3)] = TimeoutError()
    mesh.asked.clear()
    with pytest.raises(AuthorizationUnavailable):
        asyncio.run(source.ask(ALICE, HOST, checks))
    assert sorted(mesh.asked) == [key(1), key(2), key(3)]
    with pytest.raises(AuthorizationUnavailable, match="no broker"):
        asyncio.run(MeshAuthorizationSource(mesh, Directory(info(5, ("gateway",))))
                    .ask(ALICE, HOST, checks))


# ---- the gateway's cache ---------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Source:
    """A broker's decisions (its FakeBroker's authorizer), counting the requests."""

    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker
        self.requests: list[int] = []
        self.fail = False

    async def ask(self, principal: str, host: str, checks: Sequence[AuthorizeCheck]
                  ) -> list[bool] | None:
        self.requests.append(len(checks))
        if self.fail:
            raise AuthorizationUnavailable("down")
        request = AuthorizeRequest(principal, host, tuple(checks))
        check_request(request)
        server = AuthorizationServer(self.broker, lambda peer: True)
        out = await server.handle(b"", Frame(TAG_AUTHORIZE, None, postcard.encode(request)))
        assert out is not None
        return check_answer(postcard.decode(AuthorizeAnswer, out), len(checks))


def test_cache_keeps_decisions_one_second_at_most() -> None:
    broker = FakeBroker([acl("t", READ)])
    source, clock = Source(broker), Clock()
    authz = RemoteAuthorizer(source.ask, clock=clock)

    async def scenario() -> None:
        assert await authz.authorize(ALICE, HOST, READ, TOPIC, "t")
        assert not await authz.authorize(ALICE, HOST, WRITE, TOPIC, "t")
        clock.now += 0.9
        assert await authz.authorize(ALICE, HOST, READ, TOPIC, "t")  # cached
        assert source.requests == [1, 1]
        broker.acls, broker.version = [acl("t", WRITE)], 1  # the ACLs change
        clock.now += 0.2  # READ was decided 1.1 s ago, WRITE 1.1 s ago: asked again
        assert await authz.decide(ALICE, HOST, [resource_check(READ, TOPIC, "t"),
                                                resource_check(WRITE, TOPIC, "t")]) \
            == [False, True]
        assert source.requests == [1, 1, 2]
        # per principal and host
        assert not await authz.authorize("User:bob", HOST, WRITE, TOPIC, "t")
        assert await authz.authorize(ALICE, "10.9.9.9", WRITE, TOPIC, "t")
        assert source.requests == [1, 1, 2, 1, 1]
        assert await authz.authorize_any(ALICE, HOST, WRITE, TOPIC)
        assert await authz.authorized_operations(ALICE, HOST, TOPIC, "t") == \
            (1 << WRITE) | (1 << DESCRIBE)
        assert await authz.cluster_operations(ALICE, HOST) == 0

    asyncio.run(scenario())


def test_cache_is_bounded_and_batches_are_split() -> None:
    source, clock = Source(FakeBroker([acl("t-", READ, PatternType.PREFIXED)])), Clock()
    authz = RemoteAuthorizer(source.ask, max_entries=100, clock=clock)
    names = [f"t-{i}" for i in range(2500)] + ["u"]
    checks = [resource_check(READ, TOPIC, n) for n in names]
    got = asyncio.run(authz.decide(ALICE, HOST, checks + checks[:3]))  # duplicates asked once
    assert got == [True] * 2500 + [False] + [True] * 3
    assert source.requests == [MAX_CHECKS, MAX_CHECKS, 501]
    assert len(authz) == 100
    # a name too long to ask about is denied without asking (the cluster has an authorizer)
    assert asyncio.run(authz.decide(ALICE, HOST, [resource_check(READ, TOPIC, "t-" * 600)])
                       ) == [False]
    assert len(source.requests) == 3


def test_no_authorizer_allows_everything_and_failures_keep_the_last_word() -> None:
    open_broker = FakeBroker(None)
    source, clock = Source(open_broker), Clock()
    authz = RemoteAuthorizer(source.ask, clock=clock)

    async def scenario() -> None:
        assert authz.enabled is None
        assert await authz.authorize(ALICE, HOST, WRITE, TOPIC, "t")
        assert authz.enabled is False
        assert await authz.authorize("User:x", HOST, READ, GROUP, "g")  # not asked again
        assert source.requests == [1]
        # no broker to ask: the cluster had no authorizer, so still allowed
        clock.now += 5
        source.fail = True
        assert await authz.authorize(ALICE, HOST, WRITE, TOPIC, "t")
        # an authorizer appears: decisions from then on; a failure then denies
        source.fail = False
        source.broker = FakeBroker([acl("t", WRITE)])
        clock.now += 5
        assert await authz.authorize(ALICE, HOST, WRITE, TOPIC, "t")
        assert not await authz.authorize(ALICE, HOST, READ, TOPIC, "t")
        assert authz.enabled is True
        source.fail = True
        clock.now += 5
        assert await authz.decide(ALICE, HOST, [resource_check(WRITE, TOPIC, "t")]) == [False]
        assert authz.failures == 2
        source.fail = False  # failures were not kept
        assert await authz.authorize(ALICE, HOST, WRITE, TOPIC, "t")

    asyncio.run(scenario())


def test_first_answer_unavailable_denies() -> None:
    source = Source(FakeBroker(None))
    source.fail = True
    authz = RemoteAuthorizer(source.ask)
    assert asyncio.run(authz.authorize(ALICE, HOST, READ, TOPIC, "t")) is False


def test_local_decisions_read_the_brokers_authorizer_when_asked() -> None:
    broker = FakeBroker(None)
    local = LocalDecisions(broker)
    assert asyncio.run(local.authorize(ALICE, HOST, READ, TOPIC, "t"))
    broker.authorizer = FakeBroker([acl("t", DESCRIBE)]).authorizer
    assert asyncio.run(local.decide(ALICE, HOST, [resource_check(READ, TOPIC, "t"),
                                                  resource_check(DESCRIBE, TOPIC, "t"),
                                                  any_check(DESCRIBE, TOPIC)])) \
        == [False, True, True]


# ---- the gateway's per-request view ----------------------------------------------------------


class Gw:
    def __init__(self, authorizer: Any) -> None:
        self.authorizer = authorizer


def request(principal: str | None) -> Request:
    session = None if principal is None else Session("GATEWAY", HOST, None, principal)
    return Request(3, 12, 1, "c", None, "127.0.0.1", session)


def test_gate_asks_as_the_requests_principal() -> None:
    local = LocalDecisions(FakeBroker([acl("t", DESCRIBE), acl("g", READ, rtype=GROUP),
                                       acl("*", READ, principal="User:ANONYMOUS")]))

    async def scenario() -> None:
        gate = Gate(Gw(local), request(ALICE))  # type: ignore[arg-type]
        assert gate.on
        assert await gate.names(DESCRIBE, TOPIC, ["t", "u", "t"]) == {"t"}
        assert await gate.allowed(DESCRIBE, GROUP, "g")
        assert not await gate.cluster(DESCRIBE)
        assert await gate.any(DESCRIBE, TOPIC) and not await gate.any(WRITE, TOPIC)
        assert await gate.operations(TOPIC, ["t", "u"]) == {"t": 1 << DESCRIBE, "u": 0}
        assert await gate.cluster_operations() == 0
        anonymous = Gate(Gw(local), request(None))  # type: ignore[arg-type]
        assert await anonymous.names(READ, TOPIC, ["x"]) == {"x"}
        codes = await unknown_topic_codes(Gw(local), request(ALICE),  # type: ignore[arg-type]
                                          DESCRIBE, ["t", "u"])
        assert codes == {"t": ErrorCode.unknown_topic_or_partition,
                         "u": ErrorCode.topic_authorization_failed}
        off = Gate(Gw(None), request(ALICE))  # type: ignore[arg-type]
        assert not off.on and await off.names(WRITE, TOPIC, ["a"]) == {"a"}
        assert await off.any(WRITE, TOPIC)
        assert await off.cluster_operations() == sum(
            1 << op for op in (5, 9, 10, 11, 12, 7, 8))

    asyncio.run(scenario())

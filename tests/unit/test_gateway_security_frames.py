"""The gateway's security frames and their servers: KafkaOpAs (tag 0x12, an op run as the
gateway's client) and the SCRAM credential lookups (tag 0x09) with the gateway's cache."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from scramp import ScramClient

from eddy import postcard
from eddy.gateway.mesh_link import KafkaOpServer, MeshForwarder
from eddy.mesh.directory import DEAD, Directory, NodeInfo
from eddy.mesh.frames import (
    KAFKA_OP_STATUS_FAILED,
    KAFKA_OP_STATUS_OK,
    TAG_CREDENTIALS,
    TAG_KAFKA_OP,
    TAG_KAFKA_OP_AS,
    CredentialAnswer,
    CredentialRequest,
    Frame,
    KafkaOpAs,
    KafkaOpRequest,
    KafkaOpResponse,
)
from eddy.metadata.records import ScramCredential
from eddy.protocol.codec import Request
from eddy.protocol.errors import ErrorCode
from eddy.security.acting import ClientId, acting_for, check_client, current_client
from eddy.security.remote_credentials import (
    CredentialCache,
    CredentialError,
    CredentialServer,
    CredentialUnavailable,
    MeshCredentialSource,
    PrefetchingSaslService,
    answer_of,
    check_request,
    credential_of,
    first_user,
)
from eddy.security.sasl import SaslFailure
from eddy.security.scram import MECHANISMS, derive_keys, salted_password
from eddy.security.session import Session

PASSWORD = "s3cret"


def info(n: int, roles: tuple[str, ...]) -> NodeInfo:
    return NodeInfo(key=bytes([n]) * 32, kafka_node_id=n, roles=roles,
                    mesh_addr=f"127.0.0.1:{9000 + n}", kafka_addr="127.0.0.1:1", rack=None,
                    version="t")


def directory() -> Directory:
    """Node 1 (this one, a broker); 2 a broker, 5 a gateway, 6 a dead gateway."""
    d = Directory(info(1, ("broker",)))
    d.hello(info(2, ("broker",)), 0)
    d.hello(info(5, ("gateway",)), 0)
    d.hello(info(6, ("gateway",)), 0)
    d.set_state(info(6, ()).key, DEAD)
    return d


def credential(user: str, mechanism: int, password: str = PASSWORD) -> ScramCredential:
    mech = MECHANISMS[mechanism]
    salt = os.urandom(16)
    keys = derive_keys(mech, salted_password(mech, password.encode(), salt, 4096))
    return ScramCredential(user, mechanism, salt, keys.stored_key, keys.server_key, 4096)


# ---- the frames ------------------------------------------------------------------------------


def test_frames_round_trip() -> None:
    inner = postcard.encode(KafkaOpRequest(7, 0x02, 0, 1000, b"body"))
    for value in (CredentialRequest("alice", 1),
                  answer_of(credential("alice", 2)), answer_of(None, 31),
                  KafkaOpAs("User:alice", "10.1.2.3", inner)):
        data = postcard.encode(value)
        assert postcard.decode(type(value), data) == value
    assert TAG_CREDENTIALS not in (TAG_KAFKA_OP, TAG_KAFKA_OP_AS)


@pytest.mark.parametrize("tp", [CredentialRequest, CredentialAnswer, KafkaOpAs])
def test_hostile_bytes_are_postcard_errors(tp: Any) -> None:
    good = {CredentialRequest: CredentialRequest("bob", 2),
            CredentialAnswer: answer_of(credential("bob", 1)),
            KafkaOpAs: KafkaOpAs("User:bob", "h", b"x" * 10)}[tp]
    data = postcard.encode(good)
    for bad in (data[:-1], data + b"\x00", b"\xff\xff\xff\xff\x0f" + data[1:],
                data[:1] + b"\xff\xff\xff\xff\x0f", b""):
        with pytest.raises(postcard.PostcardError):
            postcard.decode(tp, bad)


def test_credential_answers_out_of_bounds_are_refused() -> None:
    good = answer_of(credential("bob", 1))
    assert credential_of(good, "bob", 1) is not None
    assert credential_of(answer_of(None), "bob", 1) is None
    fields = CredentialAnswer.__dataclass_fields__
    assert set(fields) == {"error_code", "found", "salt", "stored_key", "server_key",
                           "iterations"}
    for bad in (
        CredentialAnswer(0, True, b"", good.stored_key, good.server_key, 4096),
        CredentialAnswer(0, True, b"s" * 1025, good.stored_key, good.server_key, 4096),
        CredentialAnswer(0, True, good.salt, good.stored_key[:31], good.server_key, 4096),
        CredentialAnswer(0, True, good.salt, good.stored_key, good.server_key + b"x", 4096),
        CredentialAnswer(0, True, good.salt, good.stored_key, good.server_key, 1),
        CredentialAnswer(0, True, good.salt, good.stored_key, good.server_key, 1 << 30),
        CredentialAnswer(0, False, good.salt, b"", b"", 0),
        CredentialAnswer(31, False, b"", b"", b"", 0),
    ):
        with pytest.raises(CredentialError):
            credential_of(bad, "bob", 1)
    # SHA-512 keys are 64 bytes: a SHA-256 answer for it is refused
    with pytest.raises(CredentialError):
        credential_of(good, "bob", 2)


def test_credential_requests_out_of_bounds_are_refused() -> None:
    check_request(CredentialRequest("a" * 1024, 2))
    for bad in (CredentialRequest("", 1), CredentialRequest("a" * 1025, 1),
                CredentialRequest("bob", 0), CredentialRequest("bob", 3)):
        with pytest.raises(CredentialError):
            check_request(bad)


def test_client_principals_are_bounded() -> None:
    assert check_client("User:alice", "127.0.0.1") is None
    for principal, host in (("alice", ""), ("User:", ""), (":x", ""),
                            ("User:" + "a" * 2000, ""), ("User:a", "h" * 256)):
        assert check_client(principal, host) is not None


# ---- the broker's credential server ----------------------------------------------------------


class FakeState:
    def __init__(self, creds: dict[tuple[str, int], ScramCredential]) -> None:
        self.creds = creds

    def scram_credential(self, user: str, mechanism: int) -> ScramCredential | None:
        return self.creds.get((user, mechanism))


class FakeBroker:
    def __init__(self, creds: dict[tuple[str, int], ScramCredential]) -> None:
        self.cluster: Any = type("C", (), {"state": FakeState(creds)})()


def ask(server: CredentialServer, peer: bytes, payload: bytes) -> CredentialAnswer:
    out = asyncio.run(server.handle(peer, Frame(TAG_CREDENTIALS, None, payload)))
    assert out is not None
    answer: CredentialAnswer = postcard.decode(CredentialAnswer, out)
    return answer


def test_credential_server_answers_mesh_members_only() -> None:
    alice = credential("alice", 2)
    server = CredentialServer(FakeBroker({("alice", 2): alice}), directory())
    request = postcard.encode(CredentialRequest("alice", 2))
    gateway, dead, stranger = info(5, ()).key, info(6, ()).key, bytes([9]) * 32
    assert credential_of(ask(server, gateway, request), "alice", 2) == alice
    assert ask(server, gateway, postcard.encode(CredentialRequest("carol", 2))).found is False
    for peer in (dead, stranger):
        answer = ask(server, peer, request)
        assert answer.error_code == ErrorCode.cluster_authorization_failed and not answer.found
    assert ask(server, gateway, b"\x05ali").error_code == ErrorCode.invalid_request
    assert ask(server, gateway, postcard.encode(CredentialRequest("x" * 2000, 1))
               ).error_code == ErrorCode.invalid_request
    no_cluster = CredentialServer(object(), directory())
    assert ask(no_cluster, gateway, request).error_code == ErrorCode.broker_not_available
    assert server.refused == 2


class Mesh:
    """rpc.call to brokers by key: a server, an exception, or raw bytes."""

    def __init__(self, answers: dict[bytes, Any]) -> None:
        self.answers = answers
        self.asked: list[bytes] = []

    async def call(self, peer: bytes, tag: int, payload: bytes, timeout_s: float) -> bytes:
        assert tag == TAG_CREDENTIALS
        self.asked.append(peer)
        answer = self.answers[peer]
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, CredentialServer):
            out = await answer.handle(info(5, ()).key, Frame(tag, None, payload))
            assert out is not None
            return out
        assert isinstance(answer, bytes)
        return answer


def test_mesh_source_asks_the_live_brokers_until_one_answers() -> None:
    d = Directory(info(5, ("gateway",)))
    for n in (1, 2, 3):
        d.hello(info(n, ("broker",)), 0)
    d.hello(info(4, ("gateway",)), 0)
    bob = credential("bob", 1)
    server = CredentialServer(FakeBroker({("bob", 1): bob}), directory_with_gateway())
    bad_key = postcard.encode(CredentialAnswer(0, True, b"s", b"k", b"k", 4096))
    mesh = Mesh({info(1, ()).key: ConnectionError("down"), info(2, ()).key: bad_key,
                 info(3, ()).key: server})
    source = MeshCredentialSource(mesh, d)
    brokers = sorted(info(n, ()).key for n in (1, 2, 3))
    for _ in range(5):  # in random order: whoever fails, the next is asked
        assert asyncio.run(source.fetch("bob", 1)) == bob
        assert mesh.asked[-1] == info(3, ()).key
    assert set(mesh.asked) <= set(brokers)  # never a gateway
    mesh.answers[info(3, ()).key] = TimeoutError()
    mesh.asked.clear()
    with pytest.raises(CredentialUnavailable):
        asyncio.run(source.fetch("bob", 1))
    assert sorted(mesh.asked) == brokers
    with pytest.raises(CredentialUnavailable, match="no broker"):
        asyncio.run(MeshCredentialSource(mesh, Directory(info(5, ("gateway",)))).fetch("b", 1))


def directory_with_gateway() -> Directory:
    d = Directory(info(3, ("broker",)))
    d.hello(info(5, ("gateway",)), 0)
    return d


# ---- the gateway's cache ---------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Source:
    def __init__(self) -> None:
        self.creds: dict[tuple[str, int], ScramCredential] = {}
        self.calls = 0
        self.fail = False
        self.gate: asyncio.Event | None = None

    async def fetch(self, user: str, mechanism: int) -> ScramCredential | None:
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise CredentialUnavailable("down")
        return self.creds.get((user, mechanism))


def test_cache_keeps_answers_one_second_at_most() -> None:
    source, clock = Source(), Clock()
    cache = CredentialCache(source.fetch, ttl_s=1.0, clock=clock)
    alice = credential("alice", 1)

    async def scenario() -> None:
        assert cache.lookup("alice", 1) is None
        await cache.prefetch("alice", [1])  # not there yet: "no" is cached too
        assert cache.lookup("alice", 1) is None and source.calls == 1
        source.creds[("alice", 1)] = alice
        clock.now += 0.3
        await cache.prefetch("alice", [1])  # fresh: not asked again
        assert source.calls == 1 and cache.lookup("alice", 1) is None
        clock.now += 0.3  # past half its life: refetched
        await cache.prefetch("alice", [1])
        assert source.calls == 2 and cache.lookup("alice", 1) == alice
        clock.now += 1.0  # a second old: never used
        assert cache.lookup("alice", 1) is None
        source.fail = True  # a broker that cannot be asked: no credential at all
        await cache.prefetch("alice", [1])
        assert cache.lookup("alice", 1) is None and cache.failures == 1

    asyncio.run(scenario())


def test_cache_asks_once_for_concurrent_logins_and_is_bounded() -> None:
    source, clock = Source(), Clock()
    cache = CredentialCache(source.fetch, max_entries=8, clock=clock)
    source.creds[("bob", 2)] = bob = credential("bob", 2)

    async def scenario() -> None:
        source.gate = asyncio.Event()
        waiting = [asyncio.ensure_future(cache.prefetch("bob", [2])) for _ in range(5)]
        await asyncio.sleep(0)
        source.gate.set()
        await asyncio.gather(*waiting)
        assert source.calls == 1 and cache.lookup("bob", 2) == bob
        source.gate = None
        for i in range(50):
            await cache.prefetch(f"u{i}", [1, 2])
        assert len(cache) == 8  # the oldest went first
        assert cache.lookup("bob", 2) is None

    asyncio.run(scenario())


# ---- the SASL exchanges with prefetched credentials ------------------------------------------


def test_first_user_of_each_mechanism() -> None:
    assert first_user("PLAIN", b"\x00alice\x00pw") == "alice"
    assert first_user("PLAIN", b"garbage") is None
    client = ScramClient(["SCRAM-SHA-256"], "a,b=c", PASSWORD)
    assert first_user("SCRAM-SHA-256", client.get_client_first().encode()) == "a,b=c"
    assert first_user("SCRAM-SHA-256", b"n,,n=alice,r=abc") == "alice"
    assert first_user("SCRAM-SHA-256", b"\xff\xfe") is None
    assert first_user("SCRAM-SHA-512", b"nonsense") is None
    assert first_user("GSSAPI", b"x") is None
    assert first_user("PLAIN", b"\x00" + b"a" * 1024 + b"\x00pw") == "a" * 1024


def service(source: Source) -> PrefetchingSaslService:
    return PrefetchingSaslService(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
                                  CredentialCache(source.fetch), 0, 0, 1000)


def scram_login(svc: PrefetchingSaslService, user: str, password: str) -> Session:
    session = Session("SASL_PLAINTEXT", "10.0.0.1", svc)

    async def run() -> None:
        client = ScramClient(["SCRAM-SHA-512"], user, password)
        assert svc.begin(session, "SCRAM-SHA-512", 1) is None
        first, _ = await svc.step(session, client.get_client_first().encode(), True)
        client.set_server_first(first.decode())
        final, _ = await svc.step(session, client.get_client_final().encode(), True)
        client.set_server_final(final.decode())

    asyncio.run(run())
    return session


def test_logins_check_the_credentials_fetched_first() -> None:
    source = Source()
    source.creds[("carol", 2)] = credential("carol", 2)
    svc = service(source)
    assert scram_login(svc, "carol", PASSWORD).principal == "User:carol"
    with pytest.raises(SaslFailure):
        scram_login(svc, "carol", "wrong")
    with pytest.raises(SaslFailure):
        scram_login(svc, "dave", PASSWORD)

    session = Session("SASL_PLAINTEXT", "10.0.0.1", svc)

    async def plain() -> None:
        assert svc.begin(session, "PLAIN", 1) is None
        await svc.step(session, b"\x00carol\x00" + PASSWORD.encode(), True)

    asyncio.run(plain())
    assert session.authenticated and session.principal == "User:carol"


# ---- ops as the gateway's client -------------------------------------------------------------


class Executor:
    def __init__(self) -> None:
        self.sessions: list[Session | None] = []

    async def execute(self, op: int, body: bytes, session: Session | None = None) -> bytes:
        self.sessions.append(session)
        return body


def op_as(principal: str, host: str, correlation: int = 3) -> bytes:
    inner = postcard.encode(KafkaOpRequest(correlation, 0x02, 0, 1000, b"records"))
    return postcard.encode(KafkaOpAs(principal, host, inner))


def serve_as(server: KafkaOpServer, peer: bytes, payload: bytes) -> KafkaOpResponse | None:
    out = asyncio.run(server.handle_as(peer, Frame(TAG_KAFKA_OP_AS, None, payload)))
    return None if out is None else postcard.decode(KafkaOpResponse, out)


def test_ops_run_as_the_client_of_an_admitted_gateway_only() -> None:
    executor = Executor()
    server = KafkaOpServer(executor, directory())  # type: ignore[arg-type]
    gateway, broker, dead = info(5, ()).key, info(2, ()).key, info(6, ()).key
    ok = serve_as(server, gateway, op_as("User:bob", "10.9.8.7"))
    assert ok is not None and ok.status == KAFKA_OP_STATUS_OK and ok.body == b"records"
    session = executor.sessions[-1]
    assert session is not None and session.authenticated
    assert (session.principal, session.peer_ip) == ("User:bob", "10.9.8.7")
    for peer, payload in ((broker, op_as("User:bob", "h")), (dead, op_as("User:bob", "h")),
                          (gateway, op_as("bob", "h")),
                          (gateway, op_as("User:bob", "h" * 300))):
        refused = serve_as(server, peer, payload)
        assert refused is not None and refused.status == KAFKA_OP_STATUS_FAILED
        assert refused.correlation_id == 3 and "refused" in refused.message
    assert len(executor.sessions) == 1 and server.refused == 4
    assert serve_as(server, gateway, op_as("User:bob", "h")[:-2]) is None  # no answer
    assert serve_as(server, gateway, postcard.encode(KafkaOpAs("User:b", "h", b"\x01"))) is None


class AsWire:
    def __init__(self, server: KafkaOpServer) -> None:
        self.server = server
        self.tags: list[int] = []

    async def call(self, peer: bytes, tag: int, payload: bytes, timeout_s: float) -> bytes:
        self.tags.append(tag)
        frame = Frame(tag, None, payload)
        out = await (self.server.handle_as(info(5, ()).key, frame) if tag == TAG_KAFKA_OP_AS
                     else self.server.handle(info(5, ()).key, frame))
        assert out is not None
        return out


def test_forwarder_sends_the_client_it_acts_for() -> None:
    executor = Executor()
    wire = AsWire(KafkaOpServer(executor, directory()))  # type: ignore[arg-type]
    d = Directory(info(5, ("gateway",)))
    d.hello(info(2, ("broker",)), 0)
    fwd = MeshForwarder(wire, d, None, timeout_errors=(TimeoutError,),
                        unavailable_errors=(ConnectionError,))
    session = Session("SASL_PLAINTEXT", "192.0.2.1", None, "User:erin")
    request = Request(0, 9, 1, "c", None, "", session)  # type: ignore[arg-type]

    async def scenario() -> None:
        assert current_client() is None
        assert await fwd.call(2, 0x02, b"one", 1000) == b"one"
        with acting_for(request):
            assert current_client() == ClientId("User:erin", "192.0.2.1")
            # a task started for the request carries its client too
            assert await asyncio.ensure_future(fwd.call(2, 0x02, b"two", 1000)) == b"two"
        assert current_client() is None

    asyncio.run(scenario())
    assert wire.tags == [TAG_KAFKA_OP, TAG_KAFKA_OP_AS]
    assert executor.sessions[0] is None
    second = executor.sessions[1]
    assert second is not None and second.principal == "User:erin"

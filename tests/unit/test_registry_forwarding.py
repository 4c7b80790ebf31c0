"""Registry writes forwarded to the write leader (``eddy.registry.forwarding``), in-process: a
leader and a follower service over one in-memory ``_schemas`` (the follower's reader lags
until it syncs), the mesh replaced by a direct call of the leader's handler. Forwarded writes
answer exactly as local ones, ids come from the leader only, a follower reads its own write
at once; no leader means 50004; the handler answers garbage with an error, never raises."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest

from eddy import postcard
from eddy.mesh.frames import TAG_REGISTRY, Frame
from eddy.registry import forward_wire as wire
from eddy.registry import forwarding
from eddy.registry.contract import (
    FORWARDING_ERROR,
    INCOMPATIBLE_SCHEMA,
    SUBJECT_NOT_FOUND,
    UNKNOWN_LEADER,
    RegistryError,
    SchemaRecord,
)
from eddy.registry.forwarding import ForwardingService, LeaderUnreachable, WriteHandler
from eddy.registry.requests import SchemaRequest
from eddy.registry.state import SchemaState

T = TypeVar("T")
MEMBER = b"m" * 32


def run(call: Awaitable[T]) -> T:
    async def wrapped() -> T:
        return await call
    return asyncio.run(wrapped())


def record(name: str, *fields: str) -> str:
    return json.dumps({"type": "record", "name": name,
                       "fields": [{"name": f, "type": "string"} for f in fields]})


class Topic:
    """The shared ``_schemas`` records."""

    def __init__(self) -> None:
        self.records: list[SchemaRecord] = []


class LeaderLog:
    """The leader's log: appends go to the topic and are applied at once."""

    def __init__(self, topic: Topic, state: SchemaState) -> None:
        self.topic, self.state = topic, state
        self.applied = 0
        self.syncs = 0

    async def append(self, records: list[SchemaRecord]) -> None:
        self.topic.records.extend(records)
        await self.sync()

    async def sync(self) -> None:
        self.syncs += 1
        for key, value in self.topic.records[self.applied:]:
            self.state.apply(key, value)
        self.applied = len(self.topic.records)


class FollowerLog(LeaderLog):
    """A follower's log: its reader applies the topic only when it syncs."""

    async def append(self, records: list[SchemaRecord]) -> None:
        raise AssertionError("a follower never writes _schemas")


class Route:
    """Two nodes: the leader is node ``leader``; calls go straight to its handler."""

    def __init__(self, me: int, leader: int | None) -> None:
        self._me = me
        self.current: int | None = leader
        self.handlers: dict[int, WriteHandler] = {}
        self.calls = 0
        self.unreachable = False

    @property
    def me(self) -> int:
        return self._me

    def leader(self) -> int | None:
        return self.current

    def is_member(self, peer: bytes) -> bool:
        return peer == MEMBER

    async def settle(self) -> None:
        return None

    async def call(self, leader: int, payload: bytes) -> bytes:
        self.calls += 1
        if self.unreachable:
            raise LeaderUnreachable("connection refused")
        answer = await self.handlers[leader].handle(MEMBER, Frame(TAG_REGISTRY, None, payload))
        assert answer is not None
        return answer


class Pair:
    """Node 1 leads, node 2 follows."""

    def __init__(self) -> None:
        self.topic = Topic()
        self.routes = {1: Route(1, 1), 2: Route(2, 1)}
        self.states = {1: SchemaState(), 2: SchemaState()}
        self.logs = {1: LeaderLog(self.topic, self.states[1]),
                     2: FollowerLog(self.topic, self.states[2])}
        self.services: dict[int, ForwardingService] = {}
        for n in (1, 2):
            log = self.logs[n]
            self.services[n] = ForwardingService(log, self.states[n], self.routes[n],
                                                 lambda log=log: log.applied)  # type: ignore[misc]
        handler = WriteHandler(self.routes[1], self.services[1], lambda: True)
        for route in self.routes.values():
            route.handlers[1] = handler

    @property
    def leader(self) -> ForwardingService:
        return self.services[1]

    @property
    def follower(self) -> ForwardingService:
        return self.services[2]


def register(service: ForwardingService, subject: str, schema: str, **body: Any) -> int:
    answer = run(service.register(subject, SchemaRequest.from_body({"schema": schema, **body})))
    return int(answer["id"])


def fails(call: Awaitable[Any]) -> RegistryError:
    with pytest.raises(RegistryError) as err:
        run(call)
    return err.value


def test_a_follower_forwards_its_writes_and_reads_them_at_once() -> None:
    pair = Pair()
    assert register(pair.follower, "a-value", record("A", "x")) == 1
    assert pair.follower.forwarded == 1 and pair.routes[2].calls == 1
    # the follower's reader caught up before the answer: its state has the schema
    entry = pair.states[2].schema_by_id(1)
    assert entry is not None and entry.subject == "a-value"
    # ids come from the leader's state, whoever is asked
    assert register(pair.leader, "b-value", record("B", "x")) == 2
    assert register(pair.follower, "c-value", record("C", "x")) == 3
    assert register(pair.follower, "a-value", record("A", "x")) == 1  # the same schema
    assert pair.leader.forwarded == 0  # the leader never forwards
    assert [e.id for e in pair.states[2].versions("c-value")] == [3]


def test_forwarded_writes_answer_as_local_ones() -> None:
    pair = Pair()
    register(pair.follower, "s", record("R", "x"))
    # BACKWARD: a new field without a default is refused, the leader's message intact
    forwarded = fails(pair.follower.register(
        "s", SchemaRequest.from_body({"schema": record("R", "x", "y")})))
    local = fails(pair.leader.register(
        "s", SchemaRequest.from_body({"schema": record("R", "x", "y")})))
    assert forwarded.code == local.code == INCOMPATIBLE_SCHEMA
    assert (forwarded.status, forwarded.message) == (local.status, local.message)
    missing = fails(pair.follower.delete_subject("nope"))
    assert (missing.status, missing.code) == (404, SUBJECT_NOT_FOUND)
    assert run(pair.follower.set_config("s", {"compatibility": "none"})) == {
        "compatibility": "none"}
    assert pair.states[1].config("s") is not None
    assert pair.leader.level_in_scope("s") == pair.follower.level_in_scope("s") == "NONE"
    assert register(pair.follower, "s", record("R", "x", "y")) == 2
    assert run(pair.follower.delete_config("s")) == {"compatibilityLevel": "NONE"}
    assert pair.states[2].config("s") is None
    assert run(pair.follower.delete_version("s", "1")) == 1
    assert run(pair.follower.delete_subject("s")) == [2]
    assert run(pair.follower.delete_subject("s", permanent=True)) == [1, 2]
    assert not pair.states[2].has_subject("s", include_deleted=True)
    assert run(pair.follower.set_mode(None, {"mode": "readonly"})) == {"mode": "readonly"}
    refused = fails(pair.follower.register(
        "t", SchemaRequest.from_body({"schema": record("T", "x")})))
    assert (refused.status, refused.message) == (422, "Subject t is in read-only mode")
    assert run(pair.follower.delete_mode(None)) == {"mode": "READONLY"}
    assert pair.follower.forwarded == 12


def test_a_schema_request_survives_the_wire_unchanged() -> None:
    pair = Pair()
    register(pair.leader, "ref", record("Ref", "x"))
    request = SchemaRequest.from_body({
        "schema": record("Main", "x"), "schemaType": "avro",
        "references": [{"name": "Ref", "subject": "ref", "version": 1}],
        "metadata": {"properties": {"owner": "\ud800 team"}}, "ruleSet": {"domainRules": []},
        "id": 7, "version": 3})
    again = SchemaRequest.from_body(json.loads(wire.schema_request_json(request)))
    assert again == request


def test_no_leader_is_unknown_leader_then_writes_work_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forwarding, "LEADER_WAIT_S", 0.2)
    monkeypatch.setattr(forwarding, "LEADER_POLL_S", 0.02)
    pair = Pair()
    pair.routes[2].current = None
    error = fails(pair.follower.register("x", SchemaRequest.from_body(
        {"schema": record("X", "a")})))
    assert (error.status, error.code) == (500, UNKNOWN_LEADER)
    pair.routes[2].current = 1
    assert register(pair.follower, "x", record("X", "a")) == 1


def test_a_leader_that_moved_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forwarding, "LEADER_POLL_S", 0.01)
    pair = Pair()
    pair.routes[1].current = 2  # node 1 no longer leads: it refuses with 50004...
    answers: list[int] = []
    real = pair.routes[2].call

    async def call(leader: int, payload: bytes) -> bytes:
        data = await real(leader, payload)
        answers.append(postcard.decode(wire.WriteAnswer, data).error_code)
        pair.routes[1].current = 1  # ...until it leads again
        return data

    pair.routes[2].call = call  # type: ignore[method-assign]
    assert register(pair.follower, "y", record("Y", "a")) == 1
    assert answers == [UNKNOWN_LEADER, 0]


def test_an_unreachable_leader_is_a_forwarding_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forwarding, "LEADER_WAIT_S", 0.1)
    monkeypatch.setattr(forwarding, "LEADER_POLL_S", 0.02)
    pair = Pair()
    pair.routes[2].unreachable = True
    error = fails(pair.follower.delete_subject("z"))
    assert error.code == FORWARDING_ERROR and "connection refused" in error.message
    assert pair.routes[2].calls >= 2  # never sent: tried again until the wait ran out


def test_a_nonsense_answer_is_a_forwarding_error() -> None:
    pair = Pair()

    async def garbage(leader: int, payload: bytes) -> bytes:
        return b"\xff\xff\xff"

    pair.routes[2].call = garbage  # type: ignore[method-assign]
    error = fails(pair.follower.delete_subject("z"))
    assert error.code == FORWARDING_ERROR and "bad answer" in error.message
    # a success whose body is not what the operation answers
    ok = wire.ok_answer({"id": "one"}, 0)

    async def wrong(leader: int, payload: bytes) -> bytes:
        return ok

    pair.routes[2].call = wrong  # type: ignore[method-assign]
    error = fails(pair.follower.register("z", SchemaRequest.from_body(
        {"schema": record("Z", "a")})))
    assert error.code == FORWARDING_ERROR and "not what register answers" in error.message


# -- the leader's handler and hostile bytes -----------------------------------------------------

def answer_of(handler: WriteHandler, payload: bytes, peer: bytes = MEMBER) -> wire.WriteAnswer:
    data = run(handler.handle(peer, Frame(TAG_REGISTRY, None, payload)))
    assert data is not None
    return postcard.decode(wire.WriteAnswer, data)


def valid_request() -> bytes:
    return wire.encode_request(wire.WriteRequest(
        wire.OP_REGISTER, "s", None, False, False, False,
        json.dumps({"schema": record("S", "a")}).encode()))


def test_the_handler_answers_every_bad_request_with_an_error() -> None:
    pair = Pair()
    handler = pair.routes[1].handlers[1]
    ok = answer_of(handler, valid_request())
    body = json.loads(ok.body)
    assert (ok.error_code, body["id"], set(body), ok.offset) == (0, 1, {"id", "guid"}, 1)
    cases = {
        "garbage": b"\x00\xff\x13garbage",
        "empty": b"",
        "unknown op": wire.encode_request(wire.WriteRequest(99, "s", None, False, False,
                                                            False, b"")),
        "no subject": wire.encode_request(wire.WriteRequest(wire.OP_DELETE_SUBJECT, None,
                                                            None, False, False, False, b"")),
        "no version": wire.encode_request(wire.WriteRequest(wire.OP_DELETE_VERSION, "s",
                                                            None, False, False, False, b"")),
        "no body": wire.encode_request(wire.WriteRequest(wire.OP_REGISTER, "s", None, False,
                                                         False, False, b"")),
        "stray body": wire.encode_request(wire.WriteRequest(wire.OP_DELETE_MODE, None, None,
                                                            False, False, False, b"{}")),
        "not json": wire.encode_request(wire.WriteRequest(wire.OP_SET_MODE, None, None, False,
                                                          False, False, b"{nope")),
        "bad utf-8": wire.encode_request(wire.WriteRequest(wire.OP_SET_MODE, None, None,
                                                           False, False, False, b'"\xff"')),
        "nested": wire.encode_request(wire.WriteRequest(wire.OP_SET_CONFIG, None, None, False,
                                                        False, False, b"[" * 200_000)),
        "long subject": wire.encode_request(wire.WriteRequest(
            wire.OP_DELETE_SUBJECT, "s" * (wire.MAX_NAME_CHARS + 1), None, False, False,
            False, b"")),
        "trailing": valid_request() + b"\x00",
        "huge length": b"\x01\x01\x01s\x00\x00\x00\x00\xff\xff\xff\xff\x0f",
    }
    for name, payload in cases.items():
        answer = answer_of(handler, payload)
        assert answer.error_code == FORWARDING_ERROR and answer.status == 400, name
        assert answer.message.startswith("Bad forwarded request"), name
    payload = valid_request()
    for cut in range(len(payload)):  # every truncation
        assert answer_of(handler, payload[:cut]).error_code == FORWARDING_ERROR
    rng = random.Random(15)
    for _ in range(300):
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
        assert answer_of(handler, junk).error_code != 0
    # a body the service refuses is its own error, not a forwarding one
    empty = wire.encode_request(wire.WriteRequest(wire.OP_REGISTER, "s", None, False, False,
                                                  False, b'{"schema": " "}'))
    refused = answer_of(handler, empty)
    assert (refused.status, refused.error_code, refused.message) == (422, 42201,
                                                                      "Empty schema")
    assert len(pair.topic.records) == 1  # nothing but the one valid write was written


def test_an_oversized_body_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire, "MAX_BODY_BYTES", 64)
    handler = Pair().routes[1].handlers[1]
    big = wire.encode_request(wire.WriteRequest(wire.OP_SET_CONFIG, None, None, False, False,
                                                False, b'{"compatibility":"' + b"x" * 100
                                                + b'"}'))
    answer = answer_of(handler, big)
    assert answer.error_code == FORWARDING_ERROR and "more than 64" in answer.message


def test_the_handler_refuses_strangers_and_when_it_cannot_lead() -> None:
    pair = Pair()
    handler = pair.routes[1].handlers[1]
    assert answer_of(handler, valid_request(), peer=b"x" * 32).status == 403
    pair.routes[1].current = 2
    moved = answer_of(handler, valid_request())
    assert moved.error_code == UNKNOWN_LEADER and "led by node 2" in moved.message
    pair.routes[1].current = 1
    starting = WriteHandler(pair.routes[1], pair.leader, lambda: False)
    assert answer_of(starting, valid_request()).error_code == UNKNOWN_LEADER
    headless = WriteHandler(pair.routes[1], None, lambda: False)
    assert "runs no schema registry" in answer_of(headless, valid_request()).message
    assert pair.topic.records == []


def test_a_failing_service_is_an_error_answer_not_an_exception() -> None:
    pair = Pair()
    handler = pair.routes[1].handlers[1]

    async def broken(request: wire.WriteRequest) -> Any:
        raise KeyError("bug")

    pair.leader.run_local = broken  # type: ignore[method-assign]
    answer = answer_of(handler, valid_request())
    assert (answer.status, answer.error_code) == (500, 500)


def test_outside_a_cluster_writes_stay_local() -> None:
    topic, state = Topic(), SchemaState()
    log = LeaderLog(topic, state)
    service = ForwardingService(log, state, None, lambda: log.applied)
    assert register(service, "a", record("A", "x")) == 1
    assert run(service.set_mode("a", {"mode": "READONLY"})) == {"mode": "READONLY"}
    assert service.forwarded == 0 and len(topic.records) == 2

"""HTTP authentication and authorization (eddy.security.http_auth, eddy.registry.access):
the Basic header parser on hostile input, passwords checked against SCRAM credentials (and
remembered only while the credentials stay), the subject -> topic mapping, and the registry's
routes behind the middleware over real HTTP (aiohttp's test server on 127.0.0.1): 401 with
the challenge, 403 40301 per ACL, lists filtered, 429 once an address failed too often."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from eddy.metadata.records import AclBinding, ScramCredential
from eddy.registry.access import topic_of_subject
from eddy.registry.http.routes import add_routes
from eddy.registry.http.server import make_app
from eddy.registry.memory_log import MemoryLog
from eddy.registry.role import _refusal
from eddy.registry.service.core import RegistryService
from eddy.registry.state import SchemaState
from eddy.security.acl import AclOperation, PatternType, Permission, ResourceType
from eddy.security.authorizer import Authorizer
from eddy.security.http_auth import (
    MAX_AUTHORIZATION_CHARS,
    HttpAuthError,
    HttpSecurity,
    PasswordCheck,
    auth_middleware,
    caller_of,
    denied_message,
    parse_basic,
)
from eddy.security.scram import MECHANISMS, derive_keys, salted_password

V1 = "application/vnd.schemaregistry.v1+json"
SCHEMA = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# -- subject -> topic ------------------------------------------------------------------------


@pytest.mark.parametrize(("subject", "topic"), [
    ("orders-value", "orders"),
    ("orders-key", "orders"),
    ("my-topic-value", "my-topic"),
    ("orders", "orders"),  # RecordNameStrategy and the like: a topic of its own name
    ("com.acme.Order", "com.acme.Order"),
    ("orders-values", "orders-values"),
    ("-value", "-value"),  # no topic in front: the subject itself
    ("-key", "-key"),
    ("a-key-value", "a-key"),  # only the last suffix goes
    ("", ""),
])
def test_subject_maps_to_topic_by_topic_name_strategy(subject: str, topic: str) -> None:
    assert topic_of_subject(subject) == topic


# -- the Basic header ------------------------------------------------------------------------


def test_parse_basic_reads_user_and_password() -> None:
    assert parse_basic(basic("alice", "s3cret")) == ("alice", "s3cret")
    assert parse_basic(basic("alice", "a:b:c")) == ("alice", "a:b:c")  # the first colon
    assert parse_basic("basic " + basic("bob", "pw")[6:]) == ("bob", "pw")  # any case
    assert parse_basic("  BASIC   " + basic("bob", "pw")[6:] + "  ") == ("bob", "pw")
    assert parse_basic(basic("zoë", "pässwörd")) == ("zoë", "pässwörd")


@pytest.mark.parametrize(("header", "why"), [
    ("Basic " + "A" * MAX_AUTHORIZATION_CHARS, "longer than"),
    ("x" * 10_000_000, "longer than"),
    ("Bearer abc.def", "scheme"),
    ("Digest username=a", "scheme"),
    ("", "scheme"),
    ("Basic", "expected user:password"),  # no token: nothing decodes to a colon
    ("Basic !!!!", "not base64"),
    ("Basic YWxpY2U6cHc", "not base64"),  # bad padding
    ("Basic YWxp Y2U6cHc=", "not base64"),  # a space inside
    ("Basic " + base64.b64encode(b"alice-no-colon").decode(), "expected user:password"),
    ("Basic " + base64.b64encode(b":pw").decode(), "empty"),
    ("Basic " + base64.b64encode(b"alice:").decode(), "empty"),
    ("Basic " + base64.b64encode(b"\xff\xfe:\xff").decode(), "not UTF-8"),
    ("Basic " + base64.b64encode(b"al\x00ice:pw").decode(), "NUL"),
    ("Basic " + base64.b64encode(b"a:" + b"p" * 1500).decode(), "too long"),
])
def test_parse_basic_refuses_hostile_headers(header: str, why: str) -> None:
    with pytest.raises(HttpAuthError) as caught:
        parse_basic(header)
    assert caught.value.status == 401
    assert why in caught.value.message
    assert caught.value.headers == {"WWW-Authenticate": 'Basic realm="eddy"'}
    assert "p" * 100 not in caught.value.message  # never echoes the credentials


# -- passwords against SCRAM credentials -----------------------------------------------------


class Users:
    """SCRAM credentials as the cluster metadata holds them."""

    def __init__(self) -> None:
        self.creds: dict[tuple[str, int], ScramCredential] = {}

    def set(self, user: str, password: str, iterations: int = 4096) -> None:
        for mech_type, mech in MECHANISMS.items():
            salt = os.urandom(16)
            keys = derive_keys(mech, salted_password(mech, password.encode(), salt,
                                                     iterations))
            self.creds[(user, mech_type)] = ScramCredential(
                user, mech_type, salt, keys.stored_key, keys.server_key, iterations)

    def lookup(self, user: str, mechanism: int) -> ScramCredential | None:
        return self.creds.get((user, mechanism))


def test_password_check_against_scram_credentials_and_remembered_while_unchanged() -> None:
    users = Users()
    users.set("alice", "right")
    check = PasswordCheck(users.lookup)

    async def main() -> None:
        assert not await check.verify("alice", "wrong", 0.0)
        assert not await check.verify("nobody", "right", 0.0)
        assert not check.remembered("alice", "right", 0.0)
        assert await check.verify("alice", "right", 0.0)
        assert check.remembered("alice", "right", 1.0)
        assert not check.remembered("alice", "wrong", 1.0)
        assert not check.remembered("alice", "right", 10_000.0)  # past its time
        assert await check.verify("alice", "right", 0.0)
        users.set("alice", "changed")  # a new password: the old one is forgotten at once
        assert not check.remembered("alice", "right", 1.0)
        assert not await check.verify("alice", "right", 1.0)
        assert await check.verify("alice", "changed", 1.0)

    asyncio.run(main())


# -- the registry behind the middleware ------------------------------------------------------


def allow(principal: str, op: AclOperation, rtype: ResourceType, name: str,
          pattern: PatternType = PatternType.LITERAL) -> AclBinding:
    return AclBinding(int(rtype), name, int(pattern), principal, "*", int(op),
                      int(Permission.ALLOW))


class Acls:
    def __init__(self) -> None:
        self.acls: set[AclBinding] = set()
        self.version = 0

    def add(self, acl: AclBinding) -> None:
        self.acls.add(acl)
        self.version += 1

    def source(self) -> tuple[object, int, set[AclBinding]]:
        return self, self.version, self.acls


async def call(client: TestClient[Any, Any], method: str, path: str, auth: str | None = None,
               body: Any = None) -> tuple[int, dict[str, str], Any]:
    headers = {} if auth is None else {"Authorization": auth}
    data = None
    if body is not None:
        data, headers["Content-Type"] = json.dumps(body).encode(), V1
    async with client.request(method, path, headers=headers, data=data) as response:
        raw = await response.read()
        return response.status, dict(response.headers), json.loads(raw) if raw else None


Scenario = Callable[[TestClient[Any, Any], HttpSecurity, Acls], Awaitable[None]]


def run(scenario: Scenario, failures_per_minute: int = 100) -> None:
    users = Users()
    users.set("admin", "admin-pw")
    users.set("alice", "alice-pw")
    users.set("bob", "bob-pw")
    acls = Acls()
    authorizer = Authorizer(acls.source, frozenset({"User:admin"}))
    security = HttpSecurity("registry", "BASIC", users.lookup, lambda: authorizer,
                            failures_per_minute=failures_per_minute, failure_delay_s=0.0)

    def routes(app: web.Application) -> None:
        add_routes(app, service)
        app.middlewares.insert(0, auth_middleware(security, _refusal))

    async def main() -> None:
        nonlocal service
        state = SchemaState()
        service = RegistryService(MemoryLog(state.apply), state)
        async with TestClient(TestServer(make_app(routes), host="127.0.0.1")) as client:
            await scenario(client, security, acls)

    service: RegistryService
    asyncio.run(main())


ADMIN, ALICE, BOB = basic("admin", "admin-pw"), basic("alice", "alice-pw"), basic("bob", "bob-pw")


def test_missing_or_wrong_credentials_get_401_with_the_challenge() -> None:
    async def scenario(client: TestClient[Any, Any], security: HttpSecurity,
                       acls: Acls) -> None:
        for auth in (None, basic("admin", "wrong"), basic("ghost", "admin-pw"), "Basic %%%"):
            status, headers, body = await call(client, "GET", "/subjects", auth)
            assert status == 401
            assert headers["WWW-Authenticate"] == 'Basic realm="eddy"'
            assert body["error_code"] == 40101
            assert "admin-pw" not in body["message"]
        status, _, _ = await call(client, "GET", "/", ADMIN)
        assert status == 200
        # unknown paths too: nothing is told before authentication
        assert (await call(client, "GET", "/nowhere"))[0] == 401
        assert (await call(client, "GET", "/nowhere", ADMIN))[0] == 404
        assert security.failures == 3  # a missing header is no failed login

    run(scenario)


def test_subjects_are_authorized_by_their_topics_acls() -> None:
    async def scenario(client: TestClient[Any, Any], security: HttpSecurity,
                       acls: Acls) -> None:
        schema = {"schema": SCHEMA}
        # a super user does everything
        status, _, body = await call(client, "POST", "/subjects/secret-value/versions", ADMIN,
                                     schema)
        assert status == 200, body
        secret_id = body["id"]
        assert (await call(client, "POST", "/subjects/orders-value/versions", ADMIN,
                           schema))[0] == 200

        # alice has no ACL: 403 on writes and reads, named after the topic
        status, _, body = await call(client, "POST", "/subjects/orders-value/versions", ALICE,
                                     schema)
        assert (status, body["error_code"]) == (403, 40301)
        assert body["message"] == ("User is denied operation Write on Topic: orders "
                                   "(subject orders-value)")
        status, _, body = await call(client, "GET", "/subjects/orders-value/versions/latest",
                                     ALICE)
        assert status == 403
        assert body["message"].startswith("User is denied operation Describe on Topic: orders")
        # ... a subject that does not exist is refused the same (nothing leaks)
        assert (await call(client, "GET", "/subjects/nothing-value/versions", ALICE))[0] == 403
        # ... but any authenticated principal reads schemas by id (serializers do)
        status, _, body = await call(client, "GET", f"/schemas/ids/{secret_id}", ALICE)
        assert status == 200 and "schema" in body
        assert (await call(client, "GET", "/subjects", ALICE))[2] == []
        assert (await call(client, "GET", "/schemas", ALICE))[2] == []
        assert (await call(client, "GET", f"/schemas/ids/{secret_id}/subjects", ALICE))[2] == []

        # READ on orders: alice reads its subjects (DESCRIBE implied) but does not write
        acls.add(allow("User:alice", AclOperation.READ, ResourceType.TOPIC, "orders"))
        assert (await call(client, "GET", "/subjects", ALICE))[2] == ["orders-value"]
        assert [s["subject"] for s in (await call(client, "GET", "/schemas", ALICE))[2]] == [
            "orders-value"]
        assert (await call(client, "GET", "/subjects/orders-value/versions", ALICE))[2] == [1]
        assert (await call(client, "POST", "/subjects/orders-value", ALICE, schema))[0] == 200
        assert (await call(client, "POST", "/compatibility/subjects/orders-value/versions/"
                           "latest", ALICE, schema))[0] == 200
        assert (await call(client, "POST", "/subjects/orders-value/versions", ALICE,
                           schema))[0] == 403
        assert (await call(client, "PUT", "/config/orders-value", ALICE,
                           {"compatibility": "NONE"}))[0] == 403

        # WRITE on a prefix: alice registers and sets per-subject config there
        acls.add(allow("User:alice", AclOperation.WRITE, ResourceType.TOPIC, "team-",
                       PatternType.PREFIXED))
        status, _, body = await call(client, "POST", "/subjects/team-a-key/versions", ALICE,
                                     schema)
        assert status == 200, body
        assert (await call(client, "PUT", "/config/team-a-key", ALICE,
                           {"compatibility": "NONE"}))[0] == 200
        assert (await call(client, "GET", "/subjects", ALICE))[2] == ["orders-value",
                                                                       "team-a-key"]
        # global config and mode: anyone reads, changes need ALTER_CONFIGS on the cluster
        assert (await call(client, "GET", "/config", ALICE))[0] == 200
        status, _, body = await call(client, "PUT", "/config", ALICE, {"compatibility": "NONE"})
        assert (status, body["message"]) == (
            403, "User is denied operation AlterConfigs on Cluster: kafka-cluster")
        assert (await call(client, "PUT", "/mode", ALICE, {"mode": "READWRITE"}))[0] == 403
        acls.add(allow("User:alice", AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER,
                       "kafka-cluster"))
        assert (await call(client, "PUT", "/config", ALICE, {"compatibility": "NONE"}))[0] == 200
        # bob still sees nothing
        assert (await call(client, "GET", "/subjects", BOB))[2] == []

    run(scenario)


def test_failed_logins_are_limited_per_address() -> None:
    async def scenario(client: TestClient[Any, Any], security: HttpSecurity,
                       acls: Acls) -> None:
        assert (await call(client, "GET", "/subjects", ADMIN))[0] == 200  # remembered
        for _ in range(3):
            assert (await call(client, "GET", "/subjects", basic("admin", "guess")))[0] == 401
        status, headers, body = await call(client, "GET", "/subjects", basic("admin", "guess"))
        assert (status, body["error_code"]) == (429, 42901)
        assert "Retry-After" in headers
        # the right password is not checked from there either, unless already known good
        assert (await call(client, "GET", "/subjects", BOB))[0] == 429
        assert (await call(client, "GET", "/subjects", ADMIN))[0] == 200
        derived = security.check.derivations
        for _ in range(5):
            await call(client, "GET", "/subjects", basic("admin", "guess"))
        assert security.check.derivations == derived  # no key derivation while limited

    run(scenario, failures_per_minute=3)


def test_denied_message_names_operation_and_resource() -> None:
    assert denied_message(AclOperation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster") == (
        "User is denied operation Describe on Cluster: kafka-cluster")
    assert denied_message(AclOperation.IDEMPOTENT_WRITE, ResourceType.TRANSACTIONAL_ID,
                          "t") == "User is denied operation IdempotentWrite on TransactionalId: t"


def test_without_basic_auth_the_principal_is_anonymous_and_still_authorized() -> None:
    acls = Acls()
    authorizer = Authorizer(acls.source, frozenset({"User:admin"}))
    security = HttpSecurity("admin", "NONE", Users().lookup, lambda: authorizer)
    seen: list[str] = []

    async def whoami(request: web.Request) -> web.Response:
        caller = caller_of(request)
        assert caller is not None
        seen.append(caller.principal)
        allowed = caller.allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster")
        return web.json_response({"allowed": allowed})

    async def main() -> None:
        app = web.Application(middlewares=[auth_middleware(security, _refusal)])
        app.router.add_get("/who", whoami)
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            # credentials are not looked at: no 401, the caller is User:ANONYMOUS
            assert (await call(client, "GET", "/who", basic("x", "y")))[2] == {"allowed": False}
            acls.add(allow("User:ANONYMOUS", AclOperation.DESCRIBE, ResourceType.CLUSTER,
                           "kafka-cluster"))
            assert (await call(client, "GET", "/who"))[2] == {"allowed": True}

    asyncio.run(main())
    assert seen == ["User:ANONYMOUS", "User:ANONYMOUS"]

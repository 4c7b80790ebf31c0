"""`eddy registry ...` against one real `eddy serve` with the schema registry on (one
server for the module, each test on its own subjects): register Avro and Protobuf with a
reference, versions, get by version and by id, compatibility exit codes, config, mode, soft
then permanent deletes, the registry's errors, usage errors, no registry running, and hostile
HTTP answers.

Most commands run in-process through typer's CliRunner (the real command functions, a few
milliseconds each instead of an interpreter start); a few run as `python -m eddy registry`
in a subprocess, as a user runs them, to cover the entry point and the environment."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import EddyProcess
from test_cli import clean_env, eddy_cli_parallel, free_port
from test_registry_clients import registry_url
from typer.testing import CliRunner

from eddy.cli.common import CliError
from eddy.cli.main import app
from eddy.cli.registry_http import MAX_RESPONSE_BYTES, RegistryClient


def user(ns: str, *extra: dict[str, Any]) -> dict[str, Any]:
    """An Avro record ``User`` with a string ``name`` and the ``extra`` fields; the
    namespace ``ns`` keeps one test's schemas (and so their ids) apart from another's."""
    return {"type": "record", "name": "User", "namespace": ns,
            "fields": [{"name": "name", "type": "string"}, *extra]}


EMAIL = {"name": "email", "type": "string", "default": ""}  # compatible: it has a default
AGE = {"name": "age", "type": "int"}  # no default: not BACKWARD compatible
COMMON_PROTO = """syntax = "proto3";
package acme;
message Money { int64 cents = 1; string currency = 2; }
"""
ORDER_PROTO = """syntax = "proto3";
package acme;
import "common.proto";
message Order { string id = 1; acme.Money total = 2; }
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EddyProcess]:
    proc = EddyProcess(tmp_path_factory.mktemp("cli-registry") / "data",
                       ["--set", "registry.listener=127.0.0.1:0"])
    proc.start()
    yield proc
    proc.kill()


@pytest.fixture
def url(server: EddyProcess) -> str:
    if not server.alive():  # an earlier test took it down; that test has failed
        server.proc = None
        server.start()
    return registry_url(server)


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def cli(url: str, *args: str) -> Ran:
    """`eddy registry ARGS` in-process, the URL from EDDY_REGISTRY_URL."""
    result = CliRunner().invoke(app, ["registry", *args], env={"EDDY_REGISTRY_URL": url},
                                catch_exceptions=False)
    return Ran(result.exit_code, result.stdout, result.stderr)


def ok(ran: Ran) -> str:
    assert ran.returncode == 0, f"exit {ran.returncode}\n{ran.stdout}\n{ran.stderr}"
    return ran.stdout


def json_out(ran: Ran) -> Any:
    return json.loads(ok(ran))


def failed(ran: Ran, stderr: str) -> None:
    """Exit 1 with exactly this one line on stderr."""
    assert (ran.returncode, ran.stderr.strip()) == (1, stderr), (ran.stdout, ran.stderr)


def write(tmp_path: Path, name: str, text: str | dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_text(text if isinstance(text, str) else json.dumps(text))
    return str(path)


def test_register_avro_and_protobuf_with_reference_then_get(url: str, tmp_path: Path) -> None:
    v1, v2 = user("a1"), user("a1", EMAIL)
    avsc, avsc2 = write(tmp_path, "user.avsc", v1), write(tmp_path, "user2.avsc", v2)
    common = write(tmp_path, "common.proto", COMMON_PROTO)
    order = write(tmp_path, "order.proto", ORDER_PROTO)
    user_id = int(ok(cli(url, "register", "a1/users", avsc)))  # "/" is URL-encoded
    common_id = json_out(cli(url, "register", "a1-common", common, "-o", "json"))["id"]
    assert common_id != user_id
    order_out = ok(cli(url, "register", "a1-orders", order,
                       "--reference", "common.proto=a1-common:1", "-o", "table"))
    assert order_out.startswith("registered under subject 'a1-orders': schema id ")
    order_id = int(order_out.split()[-1])
    assert order_id not in (user_id, common_id)

    assert int(ok(cli(url, "register", "a1/users", avsc))) == user_id  # same schema, same id
    v2_id = json_out(cli(url, "register", "a1/users", avsc2, "-o", "json"))["id"]
    assert v2_id not in (user_id, common_id, order_id)
    assert ok(cli(url, "subjects", "--prefix", "a1")).split() == [
        "a1-common", "a1-orders", "a1/users"]
    assert {"a1-common", "a1-orders", "a1/users"} <= set(json_out(cli(url, "subjects",
                                                                          "-o", "json")))
    assert json_out(cli(url, "versions", "a1/users", "-o", "json")) == [1, 2]

    got = json_out(cli(url, "get", "a1/users", "1", "-o", "json"))
    assert (got["subject"], got["version"], got["id"], got["schemaType"]) == (
        "a1/users", 1, user_id, "AVRO")
    assert json.loads(got["schema"]) == v1 and got["references"] == []
    latest = json_out(cli(url, "get", "a1/users", "-o", "json"))
    assert (latest["version"], latest["id"]) == (2, v2_id)
    proto = json_out(cli(url, "get", "--id", str(order_id), "-o", "json"))
    assert proto["id"] == order_id and proto["schemaType"] == "PROTOBUF"
    assert proto["references"] == [
        {"name": "common.proto", "subject": "a1-common", "version": 1}]
    assert proto["versions"] == [{"subject": "a1-orders", "version": 1}]
    text = ok(cli(url, "get", "a1-orders", "latest", "--schema-only"))
    assert text == proto["schema"] and 'import "common.proto";' in text
    assert "message Order" in text
    shown = ok(cli(url, "get", "a1/users", "-o", "table"))
    assert "a1/users" in shown and str(v2_id) in shown and '"email"' in shown
    assert "subject: a1/users\nversion: 2\n" in ok(cli(url, "get", "a1/users"))


def test_check_exit_codes(url: str, tmp_path: Path) -> None:
    ok(cli(url, "register", "a2-users", write(tmp_path, "v1.avsc", user("a2"))))
    good = write(tmp_path, "v2.avsc", user("a2", EMAIL))
    bad = write(tmp_path, "bad.avsc", user("a2", AGE))
    assert ok(cli(url, "check", "a2-users", good)).strip() == (
        "compatible with subject 'a2-users' version latest")
    ran = cli(url, "check", "a2-users", bad)
    assert (ran.returncode, ran.stdout.strip()) == (
        1, "incompatible with subject 'a2-users' version latest")

    ran = cli(url, "check", "a2-users", bad, "--verbose", "--version", "1")
    assert ran.returncode == 1
    lines = ran.stdout.splitlines()
    assert lines[0] == "incompatible with subject 'a2-users' version 1:"
    assert any("READER_FIELD_MISSING_DEFAULT_VALUE" in line and "'age'" in line
               for line in lines[1:])
    ran = cli(url, "check", "a2-users", bad, "--verbose", "-o", "json")
    assert ran.returncode == 1
    answer = json.loads(ran.stdout)
    assert answer["is_compatible"] is False and answer["messages"]

    assert ok(cli(url, "check", "a2-users", good, "--version", "all")).strip() == (
        "compatible with subject 'a2-users' every version")
    failed(cli(url, "check", "a2-users", good, "--version", "7"),
           "error 40402: Version 7 not found.")


def test_config_and_mode(url: str, tmp_path: Path) -> None:
    ok(cli(url, "register", "a3-users", write(tmp_path, "v1.avsc", user("a3"))))
    level = json_out(cli(url, "config", "-o", "json"))["compatibilityLevel"]
    failed(cli(url, "config", "a3-users"),
           "error 40408: Subject 'a3-users' does not have subject-level compatibility "
           "configured")
    assert ok(cli(url, "config", "a3-users", "--effective")).splitlines() == [
        "scope: a3-users", f"compatibility: {level}"]

    assert ok(cli(url, "config", "a3-users", "--set", "full_transitive")).strip() == (
        "compatibility of subject 'a3-users' set to FULL_TRANSITIVE")
    assert json_out(cli(url, "config", "a3-users", "-o", "json")) == {
        "compatibilityLevel": "FULL_TRANSITIVE"}
    assert ok(cli(url, "config", "a3-users", "--delete")).strip() == (
        "compatibility of subject 'a3-users' deleted (was FULL_TRANSITIVE)")
    failed(cli(url, "config", "a3-users"),
           "error 40408: Subject 'a3-users' does not have subject-level compatibility "
           "configured")

    assert ok(cli(url, "mode", "a3-users", "--set", "READONLY")).strip() == (
        "mode of subject 'a3-users' set to READONLY")
    v2 = write(tmp_path, "v2.avsc", user("a3", EMAIL))
    failed(cli(url, "register", "a3-users", v2),
           "error 42205: Subject a3-users is in read-only mode")
    assert json_out(cli(url, "mode", "a3-users", "-o", "json")) == {"mode": "READONLY"}
    assert ok(cli(url, "mode")).splitlines() == ["scope: global", "mode: READWRITE"]
    assert ok(cli(url, "mode", "a3-users", "--delete")).strip() == (
        "mode of subject 'a3-users' deleted (was READONLY)")
    assert int(ok(cli(url, "register", "a3-users", v2))) > 0


def test_soft_then_permanent_delete(url: str, tmp_path: Path) -> None:
    v1 = user("a4")
    first = int(ok(cli(url, "register", "a4-users", write(tmp_path, "v1.avsc", v1))))
    ok(cli(url, "register", "a4-users", write(tmp_path, "v2.avsc", user("a4", EMAIL))))
    assert ok(cli(url, "delete", "a4-users", "1")).strip() == (
        "soft-deleted subject 'a4-users' version 1")
    assert json_out(cli(url, "versions", "a4-users", "-o", "json")) == [2]
    assert json_out(cli(url, "versions", "a4-users", "--deleted", "-o", "json")) == [1, 2]
    by_id = json_out(cli(url, "get", "--id", str(first), "-o", "json"))
    assert json.loads(by_id["schema"]) == v1  # a soft delete keeps the id readable
    # --permanent soft-deletes what is still live, then deletes every version for good
    assert json_out(cli(url, "delete", "a4-users", "--permanent", "-o", "json")) == {
        "subject": "a4-users", "versions": [1, 2], "permanent": True}
    assert "a4-users" not in json_out(cli(url, "subjects", "--deleted", "-o", "json"))
    failed(cli(url, "get", "--id", str(first)), f"error 40403: Schema {first} not found")

    # a subject already soft-deleted: --permanent goes straight on (the soft step's 40404)
    ok(cli(url, "register", "a4-more", write(tmp_path, "m.avsc", user("a4m"))))
    assert ok(cli(url, "delete", "a4-more")).strip() == "soft-deleted subject 'a4-more' version 1"
    failed(cli(url, "delete", "a4-more"), "error 40404: Subject 'a4-more' was soft deleted.Set "
                                          "permanent=true to delete permanently")
    assert ok(cli(url, "delete", "a4-more", "--permanent")).strip() == (
        "permanently deleted subject 'a4-more' version 1")
    failed(cli(url, "versions", "a4-more", "--deleted"),
           "error 40401: Subject 'a4-more' not found.")


def test_unknown_subject_and_usage_errors(url: str, tmp_path: Path) -> None:
    avsc = write(tmp_path, "v1.avsc", user("a5"))
    for args in (["get", "a5-nope"], ["versions", "a5-nope"], ["delete", "a5-nope"]):
        failed(cli(url, *args), "error 40401: Subject 'a5-nope' not found.")
    ran = cli(url, "register", "a5-x", avsc, "--reference", "x=a5-nope:1")
    assert ran.returncode == 1 and ran.stderr.startswith("error 42201: Invalid schema ")
    assert 'No schema reference found for subject "a5-nope" and version 1' in ran.stderr
    failed(cli(url, "register", "a5-x", str(tmp_path / "missing.avsc")),
           f"error: {tmp_path / 'missing.avsc'}: cannot read the schema file (No such file "
           f"or directory)")

    text = write(tmp_path, "schema.txt", "{}")
    usage = [["get"], ["get", "s", "--id", "1"], ["get", "s", "one"],
             ["register", "s", avsc, "--reference", "no-equals"],
             ["register", "s", avsc, "--reference", "n=s:zero"], ["register", "s", text],
             ["config", "--set", "SIDEWAYS"], ["config", "--set", "FULL", "--delete"],
             ["mode", "--force"], ["check", "s", avsc, "--version", "-3"]]
    dead = f"http://127.0.0.1:{free_port()}"  # exit 2, not 1: nothing was attempted
    for args in usage:
        ran = cli(dead, *args)
        assert ran.returncode == 2, (args, ran.stdout, ran.stderr)
        assert "usage error: " in ran.stderr or "Invalid value" in ran.stderr, ran.stderr


def test_as_a_command_and_registry_not_running(url: str, tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    common = write(tmp_path, "common.proto", COMMON_PROTO)
    env = clean_env(EDDY_REGISTRY_URL=dead)
    by_env, by_flag, live = eddy_cli_parallel(
        [["registry", "subjects"], ["registry", "get", "x", "--url", dead],
         ["registry", "register", "a6-common", common, "--url", url, "-o", "json"]], env=env)
    expected = (f"error: cannot reach the schema registry at {dead} (Connection refused). "
                f"Is it running? Point eddy at it with --url URL or the EDDY_REGISTRY_URL "
                f"variable.")
    for ran in (by_env, by_flag):
        assert (ran.returncode, ran.stderr.strip()) == (1, expected), ran.stderr
    assert live.returncode == 0, live.stderr
    got = json_out(cli(url, "get", "a6-common", "-o", "json"))
    assert json.loads(live.stdout) == {"id": got["id"], "guid": got["guid"]}
    assert got["schemaType"] == "PROTOBUF"
    failed(cli(url, "subjects", "--url", "ftp://x"),
           "error: bad --url 'ftp://x': expected http://HOST:PORT, e.g. --url "
           "http://127.0.0.1:8081")


# ---- hostile or wrong servers (the client in-process: quick, and no registry needed) --------


Reply = bytes | Callable[[socket.socket, threading.Event], None]


class OneShotServer:
    """A loopback TCP server that reads a request and answers `reply` (bytes, or a callable
    given the socket and the server's `stopped` event), for each connection until closed."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.stopped = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.recv(65536)
                    if callable(self.reply):
                        self.reply(conn, self.stopped)
                    else:
                        conn.sendall(self.reply)
                except OSError:
                    pass

    def close(self) -> None:
        self.stopped.set()
        self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept()
        self.sock.close()
        self.thread.join(5)


def answer(status: str, body: bytes) -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


def stream_forever(conn: socket.socket, stopped: threading.Event) -> None:
    """A chunked body longer than the client's bound (it must stop reading it)."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n")
    piece = b"x" * 65536
    chunk = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    for _ in range(MAX_RESPONSE_BYTES // len(piece) + 8):
        conn.sendall(chunk)


def silent(conn: socket.socket, stopped: threading.Event) -> None:
    stopped.wait(10)


def client_error(reply: Reply, timeout: float = 10.0) -> Exception:
    """What one GET /subjects against a server answering `reply` raises."""
    server = OneShotServer(reply)
    try:
        with RegistryClient(server.url, timeout=timeout) as client, \
                pytest.raises(Exception) as info:
            client.call("GET", ["subjects"], expect=list)
        return info.value
    finally:
        server.close()


def test_hostile_answers() -> None:
    declared = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n[" % (MAX_RESPONSE_BYTES + 1))
    exc = client_error(declared)
    assert isinstance(exc, CliError) and "larger than 16 MiB (it declares" in exc.message

    exc = client_error(stream_forever)
    assert isinstance(exc, CliError) and "larger than 16 MiB (more than that" in exc.message

    exc = client_error(answer("200 OK", b"<html>hello</html>"))
    assert isinstance(exc, CliError) and "a body that is not JSON" in exc.message

    exc = client_error(answer("200 OK", b'{"subjects": []}'))
    assert isinstance(exc, CliError) and "JSON of the wrong shape (dict: " in exc.message

    exc = client_error(answer("502 Bad Gateway", b"upstream down"))
    assert str(exc) == "error 502: HTTP 502 Bad Gateway (upstream down)"

    exc = client_error(answer("404 Not Found", b'{"error_code":40401,"message":"gone"}'))
    assert str(exc) == "error 40401: gone"

    start = time.monotonic()
    exc = client_error(silent, timeout=0.5)
    assert isinstance(exc, CliError) and "within 0.5 s" in exc.message
    assert time.monotonic() - start < 3

    exc = client_error(b"not http at all\r\n\r\n")
    assert isinstance(exc, CliError) and "is this the schema registry's address" in exc.message

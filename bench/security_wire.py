"""The wire side of bench.security: test certificates (cryptography), a raw Kafka connection
(plain or TLS, Python's ssl) that logs in with SCRAM, and the connection-rate workers.

A SCRAM login here is SaslHandshake v1 + two SaslAuthenticate v1 round trips, as librdkafka
does it; the client caches the salted password per (password, salt, iterations), so the
rate measured is the broker's (a librdkafka client would redo PBKDF2's 4,096 rounds on
every connection on its side).
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import secrets
import socket
import ssl
import struct
import time
import traceback
from dataclasses import dataclass
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

NS = 1_000_000_000
_CLIENT_ID = b"eddy-bench-security"
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_SALTED: dict[tuple[str, str, bytes, int], bytes] = {}
#: what the connection-rate workers open: TCP or TLS, with or without a SCRAM login
KINDS = ("plaintext", "tls", "sasl", "tls_sasl")


class AuthFailed(ConnectionError):
    """The broker refused the SCRAM login (its error code and message)."""


# ---------------------------------------------------------------------------- certificates


@dataclass(frozen=True)
class Certs:
    ca: Path
    server_chain: Path
    server_key: Path


def make_certs(directory: Path) -> Certs:
    """A CA and a server certificate for 127.0.0.1 / localhost signed by it (EC P-256,
    valid a day), as PEM files in ``directory``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Eddy Bench"),
                          x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    now = datetime.datetime.now(datetime.UTC)

    def cert(subject: x509.Name, key: Any, issuer: x509.Name, signer: Any,
             ca: bool) -> x509.Certificate:
        b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(minutes=5))
             .not_valid_after(now + datetime.timedelta(days=1))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            b = b.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(IPv4Address("127.0.0.1")), x509.DNSName("localhost")]),
                critical=False)
        return b.sign(signer, hashes.SHA256())

    directory.mkdir(parents=True, exist_ok=True)
    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(
        ec.SECP256R1())
    ca_name = name("Eddy Bench CA")
    ca = cert(ca_name, ca_key, ca_name, ca_key, True)
    server = cert(name("eddy-bench-server"), server_key, ca_name, ca_key, False)
    pem = serialization.Encoding.PEM
    out = Certs(directory / "ca.pem", directory / "server.pem", directory / "server.key")
    out.ca.write_bytes(ca.public_bytes(pem))
    out.server_chain.write_bytes(server.public_bytes(pem) + ca.public_bytes(pem))
    out.server_key.write_bytes(server_key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return out


# ---------------------------------------------------------------------------- connection


def _str(s: bytes) -> bytes:
    return struct.pack(">h", len(s)) + s


class Conn:
    """One Kafka connection, request header v1, non-flexible API versions only."""

    def __init__(self, host: str, port: int, ca: str | None = None, timeout: float = 10.0,
                 context: ssl.SSLContext | None = None) -> None:
        raw = socket.create_connection((host, port), timeout=timeout)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ca is not None or context is not None:
            ctx = context or ssl.create_default_context(cafile=ca)
            try:
                self.sock: socket.socket = ctx.wrap_socket(raw, server_hostname=host)
            except BaseException:
                raw.close()
                raise
        else:
            self.sock = raw
        self._corr = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, api_key: int, version: int, body: bytes) -> memoryview:
        """Send one request; the response body after the correlation id."""
        self._corr += 1
        head = struct.pack(">hhi", api_key, version, self._corr) + _str(_CLIENT_ID)
        frame = head + body
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        (size,) = struct.unpack(">i", self._recv(4))
        if not 4 <= size <= 16 * 1024 * 1024:
            raise ConnectionError(f"response size {size} out of range")
        answer = memoryview(self._recv(size))
        (corr,) = struct.unpack_from(">i", answer)
        if corr != self._corr:
            raise ConnectionError(f"correlation id {corr}, expected {self._corr}")
        return answer[4:]

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed by the broker")
            buf += chunk
        return bytes(buf)

    def api_versions(self) -> None:
        """ApiVersions v0: one answered request (the broker finished the handshake)."""
        (error,) = struct.unpack_from(">h", self.call(18, 0, b""))
        if error:
            raise ConnectionError(f"ApiVersions: error {error}")

    def _authenticate(self, token: bytes) -> bytes:
        body = self.call(36, 1, struct.pack(">i", len(token)) + token)
        error, msg_len = struct.unpack_from(">hh", body)
        pos = 4 + max(msg_len, 0)
        message = bytes(body[4:pos]).decode(errors="replace") if msg_len >= 0 else ""
        if error:
            raise AuthFailed(f"SaslAuthenticate: error {error}: {message}")
        (n,) = struct.unpack_from(">i", body, pos)
        return bytes(body[pos + 4:pos + 4 + max(n, 0)])

    def scram_login(self, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> None:
        """SaslHandshake v1 + SCRAM (RFC 5802) over SaslAuthenticate v1; raises AuthFailed."""
        (error,) = struct.unpack_from(">h", self.call(17, 1, _str(mechanism.encode())))
        if error:
            raise AuthFailed(f"SaslHandshake {mechanism}: error {error}")
        algo = _HASHES[mechanism]
        nonce = secrets.token_hex(12)
        first_bare = f"n={_saslname(user)},r={nonce}"
        server_first = self._authenticate(f"n,,{first_bare}".encode()).decode()
        fields = dict(f.split("=", 1) for f in server_first.split(","))
        if not fields.get("r", "").startswith(nonce):
            raise AuthFailed(f"server nonce does not extend ours: {server_first!r}")
        salt, iterations = base64.b64decode(fields["s"]), int(fields["i"])
        without_proof = f"c=biws,r={fields['r']}"
        auth_message = f"{first_bare},{server_first},{without_proof}".encode()
        key = (algo, password, salt, iterations)
        salted = _SALTED.get(key)
        if salted is None:
            salted = _SALTED[key] = hashlib.pbkdf2_hmac(algo, password.encode(), salt,
                                                        iterations)
        client_key = hmac.digest(salted, b"Client Key", algo)
        signature = hmac.digest(hashlib.new(algo, client_key).digest(), auth_message, algo)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        final = f"{without_proof},p={base64.b64encode(proof).decode()}"
        server_final = self._authenticate(final.encode()).decode()
        expected = hmac.digest(hmac.digest(salted, b"Server Key", algo), auth_message, algo)
        if server_final != f"v={base64.b64encode(expected).decode()}":
            raise AuthFailed(f"server signature does not verify: {server_final!r}")


def _saslname(user: str) -> str:
    return user.replace("=", "=3D").replace(",", "=2C")


def login_ok(host: str, port: int, user: str, password: str,
             mechanism: str = "SCRAM-SHA-512", timeout: float = 5.0) -> bool:
    """True when a fresh SASL_PLAINTEXT connection logs in as ``user`` and is then served
    (ApiVersions answered); False on a refused login or a dropped connection."""
    try:
        with Conn(host, port, timeout=timeout) as c:
            c.scram_login(user, password, mechanism)
            c.api_versions()
            return True
    except (OSError, AuthFailed):
        return False


# ---------------------------------------------------------------------------- rate workers


def connect_worker(p: dict[str, Any], barrier: Any, queue: Any) -> None:
    """In a spawned process: open connections of kind ``p["kind"]`` one after another for
    ``p["seconds"]``; each does its handshake(s), one answered ApiVersions and is closed."""
    try:
        queue.put(_connect_loop(p, barrier))
    except BaseException as exc:
        queue.put({"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()})


def _connect_loop(p: dict[str, Any], barrier: Any) -> dict[str, Any]:
    kind, host, port = p["kind"], p["host"], int(p["port"])
    context = ssl.create_default_context(cafile=p["ca"]) if kind.startswith("tls") else None
    user, password, mechanism = p["user"], p["password"], p["mechanism"]

    def once() -> None:
        with Conn(host, port, context=context) as c:
            if kind.endswith("sasl"):
                c.scram_login(user, password, mechanism)
            c.api_versions()

    once()  # warm-up: the salted password is cached from here on
    barrier.wait(timeout=60)
    cpu0 = time.process_time()
    t0 = time.monotonic_ns()
    deadline = t0 + int(float(p["seconds"]) * NS)
    done = failed = 0
    first_error: str | None = None
    while time.monotonic_ns() < deadline:
        try:
            once()
            done += 1
        except (OSError, AuthFailed) as exc:
            failed += 1
            first_error = first_error or f"{type(exc).__name__}: {exc}"
    t1 = time.monotonic_ns()
    return {"t0_ns": t0, "t1_ns": t1, "connections": done, "failed": failed,
            "first_error": first_error, "client_cpu_s": time.process_time() - cpu0}

"""Helpers of the TLS/SASL tests: certificates made with cryptography (a CA, a server
certificate for 127.0.0.1, a client certificate) and an `eddy serve` with several listeners
whose addresses come from its EDDY_LISTENER lines."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from ipaddress import IPv4Address
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

ADMIN = ("admin", "admin-secret")


@dataclass
class Certs:
    ca: Path
    server_chain: Path
    server_key: Path
    client_chain: Path
    client_key: Path


def _name(cn: str, org: str = "Eddy Tests") -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: x509.Name, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
          signer: ec.EllipticCurvePrivateKey, ca: bool, ip: bool) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ip:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(IPv4Address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False)
    return builder.sign(signer, hashes.SHA256())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))


def make_certs(directory: Path, server_cn: str = "eddy-server") -> Certs:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("Eddy Test CA")
    ca = _cert(ca_name, ca_key, ca_name, ca_key, ca=True, ip=False)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _cert(_name(server_cn), server_key, ca_name, ca_key, ca=False, ip=True)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _cert(_name("alice-client", "Clients"), client_key, ca_name, ca_key, ca=False,
                   ip=False)
    pem = serialization.Encoding.PEM
    certs = Certs(directory / "ca.pem", directory / "server.pem", directory / "server.key",
                  directory / "client.pem", directory / "client.key")
    certs.ca.write_bytes(ca.public_bytes(pem))
    certs.server_chain.write_bytes(server.public_bytes(pem) + ca.public_bytes(pem))
    _write_key(certs.server_key, server_key)
    certs.client_chain.write_bytes(client.public_bytes(pem))
    _write_key(certs.client_key, client_key)
    return certs


class SecureNode:
    """`eddy serve` with `listeners`; `addr[NAME]` is each listener's HOST:PORT."""

    def __init__(self, data_dir: Path, settings: dict[str, str]) -> None:
        self.data_dir = data_dir
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        self.settings = settings
        self.addr: dict[str, str] = {}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20.0) -> SecureNode:
        cmd = [sys.executable, "-m", "eddy", "serve", "--data-dir", str(self.data_dir)]
        for k, v in self.settings.items():
            cmd += ["--set", f"{k}={v}"]
        wanted = len(self.settings["listeners"].split(","))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log,
                                         env={**os.environ})
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        os.set_blocking(fd, False)
        buf = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(self.addr) < wanted:
            if self.proc.poll() is not None:
                raise RuntimeError(f"eddy exited:\n{self.logs()}")
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                time.sleep(0.05)
                continue
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line.startswith(b"EDDY_LISTENER "):
                    fields = dict(f.split("=", 1) for f in line.decode().split()[1:])
                    self.addr[fields["name"]] = fields["kafka"]
        if len(self.addr) < wanted:
            self.kill()
            raise RuntimeError(f"eddy listeners not up in {timeout}s:\n{self.logs()}")
        return self

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def logs(self) -> str:
        try:
            return self.log_path.read_text()
        except FileNotFoundError:
            return ""

"""A node's identity on the mesh (seed 000): an Ed25519 key pair; the NodeId is its public key.

The private key lives in `<data_dir>/node.key` (PEM PKCS#8, mode 0600). It is created once,
atomically (temp file with mode 0600, fsync, hard link to the final name so an existing key is
never overwritten, fsync of the directory), and a key file readable by group or others, or one
that does not parse as an Ed25519 key, stops the node with an `IdentityError` saying what to do.

On the wire a node shows a self-signed X.509 certificate made from that key; peers take the
NodeId from the certificate's public key after checking the self-signature (`peer_node_id`).
There is no CA: trust is the key itself (an expected NodeId, an allow-list, or a membership
token signed by the cluster's key carried in the certificate: `eddy.mesh.membership`).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import datetime
import os
import secrets
import stat
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.x509.oid import NameOID, SignatureAlgorithmOID

KEY_FILE = "node.key"
NODE_ID_LEN = 32
HEX_LEN = 64
BASE32_LEN = 52
SHORT_LEN = 10


class IdentityError(Exception):
    """A key file, NodeId text or peer certificate that cannot be used; the message says why."""


# --- NodeId helpers --------------------------------------------------------------------------


def to_hex(node_id: bytes) -> str:
    return node_id.hex()


def to_base32(node_id: bytes) -> str:
    """Lowercase RFC 4648 base32 without padding: 52 characters for a 32-byte NodeId."""
    return base64.b32encode(node_id).decode("ascii").rstrip("=").lower()


def short(node_id: bytes) -> str:
    """The first 10 base32 characters, for logs."""
    return to_base32(node_id)[:SHORT_LEN]


def parse_node_id(text: str) -> bytes:
    """A NodeId from 64 hex digits or 52 base32 characters (either case)."""
    s = text.strip()
    if len(s) == HEX_LEN:
        try:
            return bytes.fromhex(s)
        except ValueError:
            raise IdentityError(f"node id {text!r}: 64 characters but not hex") from None
    if len(s) == BASE32_LEN:
        try:
            raw = base64.b32decode(s.upper() + "====", casefold=False)
        except (binascii.Error, ValueError):
            raise IdentityError(f"node id {text!r}: 52 characters but not base32") from None
        if len(raw) != NODE_ID_LEN or to_base32(raw) != s.lower():
            raise IdentityError(f"node id {text!r}: not a canonical base32 node id")
        return raw
    raise IdentityError(
        f"node id {text!r}: expected 64 hex digits or 52 base32 characters, got {len(s)}"
    )


class NodeId:
    """Namespace of NodeId helpers (a NodeId itself is plain `bytes`)."""

    to_hex = staticmethod(to_hex)
    to_base32 = staticmethod(to_base32)
    short = staticmethod(short)
    parse = staticmethod(parse_node_id)


# --- certificates ----------------------------------------------------------------------------


def peer_node_id(cert: x509.Certificate) -> bytes:
    """The NodeId a peer's certificate proves: its Ed25519 key, which must have signed it."""
    try:
        key = cert.public_key()
    except Exception as exc:  # unsupported or malformed key
        raise IdentityError(f"peer certificate: unreadable public key ({exc})") from None
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise IdentityError(
            f"peer certificate: key is {type(key).__name__}, expected Ed25519"
        )
    try:  # cryptography parses fields lazily: a malformed one raises ValueError here
        if cert.signature_algorithm_oid != SignatureAlgorithmOID.ED25519:
            raise IdentityError("peer certificate: not signed with Ed25519")
        if cert.issuer != cert.subject:
            raise IdentityError(
                "peer certificate: not self-issued (issuer differs from subject)")
        key.verify(cert.signature, cert.tbs_certificate_bytes)
    except InvalidSignature:
        raise IdentityError("peer certificate: not signed by its own key") from None
    except ValueError as exc:
        raise IdentityError(f"peer certificate: malformed ({exc})") from None
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


class NodeIdentity:
    """An Ed25519 private key and what derives from it: NodeId and certificate."""

    def __init__(self, private_key: ed25519.Ed25519PrivateKey) -> None:
        self.private_key = private_key
        self.node_id: bytes = private_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self._certs: dict[bytes | None, x509.Certificate] = {}

    @classmethod
    def generate(cls) -> NodeIdentity:
        """A fresh in-memory identity (tests, tools); nodes use `load_or_create`."""
        return cls(ed25519.Ed25519PrivateKey.generate())

    @classmethod
    def load_or_create(cls, data_dir: str | os.PathLike[str]) -> NodeIdentity:
        directory = Path(data_dir)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / KEY_FILE
        if not os.path.lexists(path):
            _create_key_file(directory, path)
        return cls(_load_key_file(path))

    def to_base32(self) -> str:
        return to_base32(self.node_id)

    def short(self) -> str:
        return short(self.node_id)

    def certificate(self, extension: x509.UnrecognizedExtension | None = None
                    ) -> x509.Certificate:
        """Self-signed, subject CN = base32 NodeId, valid from a day ago for 100 years; with
        `extension` (non-critical) when given: the membership token (eddy.mesh.membership)."""
        key = None if extension is None else extension.oid.dotted_string.encode() + (
            b"=" + extension.value)
        cert = self._certs.get(key)
        if cert is None:
            now = datetime.datetime.now(datetime.UTC)
            name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.to_base32())])
            builder = (
                x509.CertificateBuilder()
                .subject_name(name)
                .issuer_name(name)
                .public_key(self.private_key.public_key())
                .serial_number(secrets.randbits(159) | 1)
                .not_valid_before(now - datetime.timedelta(days=1))
                .not_valid_after(now + datetime.timedelta(days=36525))
            )
            if extension is not None:
                builder = builder.add_extension(extension, critical=False)
            cert = self._certs[key] = builder.sign(self.private_key, algorithm=None)
        return cert


def _create_key_file(directory: Path, path: Path) -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    tmp = directory / f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            os.fchmod(fd, 0o600)  # whatever the umask did
            os.write(fd, pem)
            os.fsync(fd)
        finally:
            os.close(fd)
        # unlike rename, link never replaces a key created meanwhile: if another process
        # won the race, its key is the one we load
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        os.unlink(tmp)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _load_key_file(path: Path) -> ed25519.Ed25519PrivateKey:
    try:
        st = os.stat(path)
    except OSError as exc:
        raise IdentityError(f"{path}: cannot stat the node key ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise IdentityError(f"{path}: the node key is not a regular file")
    if st.st_mode & 0o077:
        raise IdentityError(
            f"{path}: the node key is accessible by group or others "
            f"(mode {stat.S_IMODE(st.st_mode):04o}); run `chmod 600 {path}`"
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise IdentityError(f"{path}: cannot read the node key ({exc.strerror})") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise IdentityError(
            f"{path}: not a PEM PKCS#8 private key ({exc}); restore it from a backup, or move "
            "it away to give this node a new identity"
        ) from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise IdentityError(f"{path}: the node key is {type(key).__name__}, expected Ed25519")
    return key

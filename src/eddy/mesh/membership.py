"""Admission to the mesh by the cluster's key (issue 16): membership tokens.

An operator makes one cluster signing key (Ed25519, `eddy mesh keygen`) and signs each
node's NodeId with it (`eddy mesh sign`): the result is the node's membership token, kept in
`<data_dir>/node.membership`. Nodes configured with the cluster's public key
(`mesh.cluster.public.key`) admit a peer whose NodeId is on `mesh.allowed.nodes` OR whose
certificate carries a valid token for that NodeId, signed by the cluster key and not expired.

How the token travels: in the node's self-signed mesh certificate (`eddy.mesh.identity`), as
a non-critical X.509 extension under OID ``2.25.37278949671948991530697892259393814756`` (a
UUID OID, ITU-T X.667: no registration needed; the UUID is
1c0baa1f-be10-41c4-954d-2960db11c0e4). The extension's value is the DER OCTET STRING of the
token, so it is checked as part of the TLS handshake's certificate, before any mesh stream
is read, and its size is checked (exactly `EXTENSION_LEN` bytes) before it is decoded.

Token (`TOKEN_LEN` = 105 bytes): version (1 byte, 1) | NodeId (32) | expiry (u64 big
endian, Unix seconds; 0: never) | Ed25519 signature (64) by the cluster key over
``CONTEXT`` + NodeId + expiry. A token names its node, so another node's token is refused
even with a valid signature; the certificate is signed by the node's own key, so a token
cannot be lifted into a certificate of another key. A token is not a secret.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import datetime
import logging
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from eddy.mesh.identity import NODE_ID_LEN, short, to_base32

#: the certificate extension carrying the token (a UUID OID, see the module docstring)
OID = x509.ObjectIdentifier("2.25.37278949671948991530697892259393814756")
VERSION = 1
SIGNATURE_LEN = 64
TOKEN_LEN = 1 + NODE_ID_LEN + 8 + SIGNATURE_LEN
#: DER OCTET STRING header of a token (short length form: TOKEN_LEN < 128)
_DER_HEADER = bytes([0x04, TOKEN_LEN])
EXTENSION_LEN = len(_DER_HEADER) + TOKEN_LEN
#: domain separation: a cluster key's signature over this and a NodeId means nothing else
CONTEXT = b"eddy mesh membership v1\x00"
MEMBERSHIP_FILE = "node.membership"
#: a token file or public key file is small: anything bigger is not one
MAX_FILE_BYTES = 4096
PUBLIC_KEY_LEN = 32
MAX_EXPIRY = 2**63 - 1

log = logging.getLogger("eddy.mesh.quic.transport")


class MembershipError(Exception):
    """A token, key or file that cannot be used; the message says why (never the bytes)."""


# --- tokens ----------------------------------------------------------------------------------


def _signed_bytes(node_id: bytes, expires_at: int) -> bytes:
    return CONTEXT + node_id + expires_at.to_bytes(8, "big")


@dataclass(frozen=True)
class MembershipToken:
    node_id: bytes
    #: Unix seconds after which the token is refused; 0: never
    expires_at: int
    signature: bytes

    def encode(self) -> bytes:
        return (bytes([VERSION]) + self.node_id + self.expires_at.to_bytes(8, "big")
                + self.signature)

    @classmethod
    def decode(cls, data: bytes) -> MembershipToken:
        """A token from exactly `TOKEN_LEN` bytes (the length is checked first)."""
        if len(data) != TOKEN_LEN:
            raise MembershipError(f"membership token of {len(data)} bytes, expected {TOKEN_LEN}")
        if data[0] != VERSION:
            raise MembershipError(f"membership token version {data[0]}, expected {VERSION}")
        expires_at = int.from_bytes(data[1 + NODE_ID_LEN:9 + NODE_ID_LEN], "big")
        if expires_at > MAX_EXPIRY:
            raise MembershipError("membership token expiry out of range")
        return cls(bytes(data[1:1 + NODE_ID_LEN]), expires_at, bytes(data[9 + NODE_ID_LEN:]))

    def expiry_text(self) -> str:
        return "never" if self.expires_at == 0 else _iso(self.expires_at)


def make_token(cluster_key: ed25519.Ed25519PrivateKey, node_id: bytes,
               expires_at: int = 0) -> MembershipToken:
    """The cluster key's token for `node_id` (expires_at: Unix seconds, 0: never)."""
    if len(node_id) != NODE_ID_LEN:
        raise MembershipError(f"node id of {len(node_id)} bytes, expected {NODE_ID_LEN}")
    if not 0 <= expires_at <= MAX_EXPIRY:
        raise MembershipError(f"expiry {expires_at} out of range")
    return MembershipToken(node_id, expires_at,
                           cluster_key.sign(_signed_bytes(node_id, expires_at)))


def verify_token(token: MembershipToken, cluster_public: ed25519.Ed25519PublicKey,
                 node_id: bytes, now: float) -> None:
    """Raise MembershipError unless `token` admits `node_id` at Unix time `now`."""
    if not secrets.compare_digest(token.node_id, node_id):
        raise MembershipError(f"membership token is for node {short(token.node_id)}")
    try:
        cluster_public.verify(token.signature, _signed_bytes(token.node_id, token.expires_at))
    except InvalidSignature:
        raise MembershipError("membership token is not signed by the cluster key") from None
    if token.expires_at and now >= token.expires_at:
        raise MembershipError(f"membership token expired at {_iso(token.expires_at)}")


# --- in the certificate ----------------------------------------------------------------------


def extension(token: MembershipToken) -> x509.UnrecognizedExtension:
    """The certificate extension that carries `token`."""
    return x509.UnrecognizedExtension(OID, _DER_HEADER + token.encode())


def token_from_extension_value(value: bytes) -> MembershipToken:
    if len(value) != EXTENSION_LEN or value[:len(_DER_HEADER)] != _DER_HEADER:
        raise MembershipError(
            f"membership extension of {len(value)} bytes, expected a {EXTENSION_LEN}-byte "
            "DER OCTET STRING")
    return MembershipToken.decode(value[len(_DER_HEADER):])


def token_from_certificate(cert: x509.Certificate) -> MembershipToken | None:
    """The token a peer's certificate carries; None when it has none."""
    try:
        ext = cert.extensions.get_extension_for_oid(OID)
    except x509.ExtensionNotFound:
        return None
    except Exception as exc:  # duplicate or malformed extensions: cryptography's ValueError
        raise MembershipError(f"unreadable certificate extensions ({type(exc).__name__})"
                              ) from None
    value = ext.value
    if not isinstance(value, x509.UnrecognizedExtension):
        raise MembershipError("membership extension of an unexpected type")
    return token_from_extension_value(value.value)


def admitted_until(cert: x509.Certificate, cluster_public: ed25519.Ed25519PublicKey,
                   node_id: bytes, now: float) -> float | None:
    """Check the peer's certificate token; returns when the admission ends (None: never).
    Raises MembershipError saying why the peer is not admitted."""
    token = token_from_certificate(cert)
    if token is None:
        raise MembershipError("no membership token")
    verify_token(token, cluster_public, node_id, now)
    return float(token.expires_at) if token.expires_at else None


# --- keys ------------------------------------------------------------------------------------


def public_hex(key: ed25519.Ed25519PublicKey) -> str:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def parse_public_key(text: str) -> ed25519.Ed25519PublicKey:
    """The cluster's public key from 64 hex digits, base64 of the 32 bytes, inline PEM, or
    the path of a PEM file (SubjectPublicKeyInfo)."""
    s = text.strip()
    if not s:
        raise MembershipError("empty cluster public key")
    raw: bytes | None = None
    if s.startswith("-----BEGIN"):
        return _pem_public(s.encode(), "mesh.cluster.public.key")
    if len(s) == 2 * PUBLIC_KEY_LEN:
        try:
            raw = bytes.fromhex(s)
        except ValueError:
            raw = None
    if raw is None and len(s) in (43, 44):
        try:
            raw = base64.b64decode(s + "=" * (-len(s) % 4), validate=True)
        except (binascii.Error, ValueError):
            try:
                raw = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
            except (binascii.Error, ValueError):
                raw = None
    if raw is not None and len(raw) == PUBLIC_KEY_LEN:
        return ed25519.Ed25519PublicKey.from_public_bytes(raw)
    path = Path(s)
    if path.is_file():
        return _pem_public(_read_small(path, "cluster public key"), str(path))
    raise MembershipError(
        "expected 64 hex digits, base64 of 32 bytes, or the path of a PEM public key file")


def _pem_public(data: bytes, where: str) -> ed25519.Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise MembershipError(f"{where}: not a PEM public key ({exc})") from None
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise MembershipError(f"{where}: the key is {type(key).__name__}, expected Ed25519")
    return key


def _read_small(path: Path, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise MembershipError(f"{path}: cannot read the {what} ({exc.strerror})") from None
    if len(data) > MAX_FILE_BYTES:
        raise MembershipError(f"{path}: too big for a {what} (over {MAX_FILE_BYTES} bytes)")
    return data


def create_cluster_key(path: Path) -> ed25519.Ed25519PrivateKey:
    """A new cluster signing key in `path` (PEM PKCS#8, mode 0600); never overwrites."""
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise MembershipError(f"{path} exists: not overwriting a key") from None
    except OSError as exc:
        raise MembershipError(f"{path}: cannot create ({exc.strerror})") from None
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, pem)
        os.fsync(fd)
    finally:
        os.close(fd)
    return key


def load_cluster_key(path: Path) -> ed25519.Ed25519PrivateKey:
    """The cluster signing key; refused when group or others may read it."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise MembershipError(f"{path}: cannot stat the cluster key ({exc.strerror})") from None
    if st.st_mode & 0o077:
        raise MembershipError(
            f"{path}: the cluster key is accessible by group or others (mode "
            f"{stat.S_IMODE(st.st_mode):04o}); run `chmod 600 {path}`")
    data = _read_small(path, "cluster key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise MembershipError(f"{path}: not a PEM PKCS#8 private key ({exc})") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise MembershipError(f"{path}: the key is {type(key).__name__}, expected Ed25519")
    return key


# --- the token file --------------------------------------------------------------------------


def write_token_file(path: Path, token: MembershipToken) -> None:
    """`path` (mode 0600) holds the token in base64 after a comment line; replaced
    atomically (re-signing a node replaces its token)."""
    text = (f"# eddy mesh membership token: node {to_base32(token.node_id)}, expires "
            f"{token.expiry_text()}\n{base64.b64encode(token.encode()).decode()}\n")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise MembershipError(f"{path}: cannot write ({exc.strerror})") from None
    try:
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, text.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def read_token_file(path: Path) -> MembershipToken:
    data = _read_small(path, "membership token")
    lines = [ln.strip() for ln in data.decode("utf-8", "replace").splitlines()]
    body = "".join(ln for ln in lines if ln and not ln.startswith("#"))
    try:
        raw = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise MembershipError(f"{path}: not a base64 membership token") from None
    try:
        return MembershipToken.decode(raw)
    except MembershipError as exc:
        raise MembershipError(f"{path}: {exc}") from None


def load_own_token(path: Path, node_id: bytes,
                   cluster_public: ed25519.Ed25519PublicKey | None, *, explicit: bool
                   ) -> MembershipToken | None:
    """This node's token, checked against its NodeId (and the cluster key when configured).
    A missing file is None unless named explicitly (mesh.membership.file). An expired token
    is returned too (the caller warns): peers refuse it, the allow-list may still admit."""
    if not explicit and not os.path.lexists(path):
        return None
    token = read_token_file(path)
    if token.node_id != node_id:
        raise MembershipError(f"{path}: the token is for node {short(token.node_id)}, this "
                              f"node is {short(node_id)}; sign this node's NodeId")
    if cluster_public is not None:
        try:
            verify_token(token, cluster_public, node_id, 0.0)
        except MembershipError as exc:
            raise MembershipError(f"{path}: {exc} (mesh.cluster.public.key)") from None
    return token


def _iso(seconds: int) -> str:
    try:
        when = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return f"{seconds} (Unix seconds)"
    return when.isoformat().replace("+00:00", "Z")


def load_admission(public_key: str, membership_file: str | None, data_dir: str,
                   node_id: bytes, now: float
                   ) -> tuple[ed25519.Ed25519PublicKey | None, MembershipToken | None]:
    """A node's settings as the transport takes them: the cluster's public key (from
    mesh.cluster.public.key; None: admission by the allow-list only) and the node's own token
    (mesh.membership.file, default `<data_dir>/node.membership`; None when there is none)."""
    cluster_public = parse_public_key(public_key) if public_key.strip() else None
    explicit = bool(membership_file and membership_file.strip())
    path = Path(membership_file.strip()) if membership_file and explicit else (
        Path(data_dir) / MEMBERSHIP_FILE)
    token = load_own_token(path, node_id, cluster_public, explicit=explicit)
    if token is not None and token.expires_at and now >= token.expires_at:
        log.warning("mesh: this node's membership token (%s) expired at %s: peers that "
                    "admit by the cluster key will refuse it; sign the node again", path,
                    token.expiry_text())
    elif token is not None:
        log.info("mesh: presenting the membership token in %s (expires %s)", path,
                 token.expiry_text())
    return cluster_public, token

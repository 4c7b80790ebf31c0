"""Node identity: the key file's life cycle, NodeId text forms, certificate verification."""

from __future__ import annotations

import datetime
import os
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import NameOID

from eddy.mesh.identity import (
    KEY_FILE,
    IdentityError,
    NodeId,
    NodeIdentity,
    parse_node_id,
    peer_node_id,
    short,
    to_base32,
    to_hex,
)


def test_key_file_is_created_with_mode_0600_and_reloads_the_same_id(tmp_path: Path) -> None:
    old_umask = os.umask(0o022)
    try:
        first = NodeIdentity.load_or_create(tmp_path / "data")
    finally:
        os.umask(old_umask)
    path = tmp_path / "data" / KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert len(first.node_id) == 32
    second = NodeIdentity.load_or_create(tmp_path / "data")
    assert second.node_id == first.node_id
    assert [p.name for p in (tmp_path / "data").iterdir()] == [KEY_FILE]  # no temp left


def test_existing_key_is_never_overwritten(tmp_path: Path) -> None:
    ident = NodeIdentity.load_or_create(tmp_path)
    before = (tmp_path / KEY_FILE).read_bytes()
    for _ in range(3):
        assert NodeIdentity.load_or_create(tmp_path).node_id == ident.node_id
    assert (tmp_path / KEY_FILE).read_bytes() == before


def test_group_readable_key_is_refused(tmp_path: Path) -> None:
    NodeIdentity.load_or_create(tmp_path)
    os.chmod(tmp_path / KEY_FILE, 0o640)
    with pytest.raises(IdentityError, match="chmod 600"):
        NodeIdentity.load_or_create(tmp_path)


def test_corrupt_key_file_is_an_error_and_is_kept(tmp_path: Path) -> None:
    path = tmp_path / KEY_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"-----BEGIN PRIVATE KEY-----\ngarbage\n-----END PRIVATE KEY-----\n")
    os.close(fd)
    with pytest.raises(IdentityError, match="not a PEM PKCS#8 private key"):
        NodeIdentity.load_or_create(tmp_path)
    assert b"garbage" in path.read_bytes()


def test_non_ed25519_key_file_is_refused(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path = tmp_path / KEY_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, pem)
    os.close(fd)
    with pytest.raises(IdentityError, match="expected Ed25519"):
        NodeIdentity.load_or_create(tmp_path)


def test_key_path_that_is_a_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / KEY_FILE).mkdir(mode=0o700)
    with pytest.raises(IdentityError, match="not a regular file"):
        NodeIdentity.load_or_create(tmp_path)


def test_text_forms_round_trip() -> None:
    node_id = NodeIdentity.generate().node_id
    b32 = to_base32(node_id)
    assert len(b32) == 52 and b32 == b32.lower() and "=" not in b32
    assert len(to_hex(node_id)) == 64
    assert parse_node_id(b32) == node_id
    assert parse_node_id(b32.upper()) == node_id
    assert parse_node_id(to_hex(node_id)) == node_id
    assert parse_node_id(to_hex(node_id).upper()) == node_id
    assert short(node_id) == b32[:10]
    assert NodeId.parse(NodeId.to_base32(node_id)) == node_id


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("abc", "expected 64 hex digits or 52 base32"),
        ("z" * 64, "not hex"),
        ("1" * 52, "not base32"),
        ("", "got 0"),
    ],
)
def test_bad_node_id_text_is_refused(text: str, match: str) -> None:
    with pytest.raises(IdentityError, match=match):
        parse_node_id(text)


def test_non_canonical_base32_is_refused() -> None:
    b32 = to_base32(bytes(32))
    bad = b32[:-1] + "b"  # sets trailing bits that a 32-byte id never has
    with pytest.raises(IdentityError, match="canonical"):
        parse_node_id(bad)


def test_certificate_names_the_node_and_verifies() -> None:
    ident = NodeIdentity.generate()
    cert = ident.certificate()
    assert cert is ident.certificate()  # cached
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    assert cn == ident.to_base32()
    now = datetime.datetime.now(datetime.UTC)
    assert cert.not_valid_before_utc < now - datetime.timedelta(hours=23)
    assert cert.not_valid_after_utc > now + datetime.timedelta(days=365 * 99)
    assert peer_node_id(cert) == ident.node_id


def _cert(subject_key: ed25519.Ed25519PrivateKey, signer: ed25519.Ed25519PrivateKey,
          ) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "x")])
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(subject_key.public_key()).serial_number(7)
        .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
        .sign(signer, algorithm=None)
    )


def test_certificate_signed_by_another_key_is_rejected() -> None:
    victim = ed25519.Ed25519PrivateKey.generate()
    attacker = ed25519.Ed25519PrivateKey.generate()
    with pytest.raises(IdentityError, match="not signed by its own key"):
        peer_node_id(_cert(victim, attacker))


def test_non_ed25519_certificate_is_rejected() -> None:
    from cryptography.hazmat.primitives import hashes

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "x")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(7)
        .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    with pytest.raises(IdentityError, match="expected Ed25519"):
        peer_node_id(cert)

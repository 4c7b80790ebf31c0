"""Membership tokens (issue 16): made by the cluster key, verified against a NodeId, carried
in the mesh certificate; hostile tokens are refused with a reason; the CLI's keygen/sign."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from typer.testing import CliRunner

from eddy.cli.mesh_keys import mesh_app, parse_expiry
from eddy.mesh.identity import NodeIdentity, peer_node_id, short, to_base32
from eddy.mesh.membership import (
    EXTENSION_LEN,
    MEMBERSHIP_FILE,
    OID,
    TOKEN_LEN,
    MembershipError,
    MembershipToken,
    admitted_until,
    extension,
    load_admission,
    load_cluster_key,
    load_own_token,
    make_token,
    parse_public_key,
    public_hex,
    read_token_file,
    token_from_certificate,
    token_from_extension_value,
    verify_token,
    write_token_file,
)

NOW = 1_700_000_000.0


@pytest.fixture
def cluster() -> ed25519.Ed25519PrivateKey:
    return ed25519.Ed25519PrivateKey.generate()


def test_token_round_trips_and_verifies(cluster: ed25519.Ed25519PrivateKey) -> None:
    node = NodeIdentity.generate().node_id
    token = make_token(cluster, node)
    raw = token.encode()
    assert len(raw) == TOKEN_LEN == 105
    assert MembershipToken.decode(raw) == token
    verify_token(token, cluster.public_key(), node, NOW)
    assert token.expiry_text() == "never"
    timed = make_token(cluster, node, int(NOW) + 60)
    verify_token(timed, cluster.public_key(), node, NOW + 59)
    assert timed.expiry_text() == "2023-11-14T22:14:20Z"


@pytest.mark.parametrize("size", [0, 1, TOKEN_LEN - 1, TOKEN_LEN + 1, 4096])
def test_tokens_of_the_wrong_length_are_refused(size: int) -> None:
    with pytest.raises(MembershipError, match=f"of {size} bytes, expected {TOKEN_LEN}"):
        MembershipToken.decode(b"\x01" * size)


def test_bad_version_and_expiry_out_of_range_are_refused(
        cluster: ed25519.Ed25519PrivateKey) -> None:
    raw = bytearray(make_token(cluster, bytes(32)).encode())
    raw[0] = 2
    with pytest.raises(MembershipError, match="version 2"):
        MembershipToken.decode(bytes(raw))
    raw[0] = 1
    raw[33:41] = b"\xff" * 8
    with pytest.raises(MembershipError, match="out of range"):
        MembershipToken.decode(bytes(raw))


def test_hostile_tokens_are_refused_with_a_reason(cluster: ed25519.Ed25519PrivateKey) -> None:
    node, other = NodeIdentity.generate().node_id, NodeIdentity.generate().node_id
    pub = cluster.public_key()
    # another node's token
    with pytest.raises(MembershipError, match=f"is for node {short(other)}"):
        verify_token(make_token(cluster, other), pub, node, NOW)
    # signed by another key
    stranger = ed25519.Ed25519PrivateKey.generate()
    with pytest.raises(MembershipError, match="not signed by the cluster key"):
        verify_token(make_token(stranger, node), pub, node, NOW)
    # a flipped signature bit, a changed expiry (the signature covers it)
    good = make_token(cluster, node, int(NOW) + 100)
    flipped = MembershipToken(node, good.expires_at,
                              bytes([good.signature[0] ^ 1]) + good.signature[1:])
    with pytest.raises(MembershipError, match="not signed"):
        verify_token(flipped, pub, node, NOW)
    with pytest.raises(MembershipError, match="not signed"):
        verify_token(MembershipToken(node, 0, good.signature), pub, node, NOW)
    # expired (at the second it expires)
    with pytest.raises(MembershipError, match="expired at 2023-11-14T22:15:00Z"):
        verify_token(good, pub, node, NOW + 100)


def test_make_token_checks_its_arguments(cluster: ed25519.Ed25519PrivateKey) -> None:
    with pytest.raises(MembershipError, match="node id of 31 bytes"):
        make_token(cluster, bytes(31))
    with pytest.raises(MembershipError, match="out of range"):
        make_token(cluster, bytes(32), -1)


def test_the_token_travels_in_the_certificate(cluster: ed25519.Ed25519PrivateKey) -> None:
    ident = NodeIdentity.generate()
    token = make_token(cluster, ident.node_id)
    cert = ident.certificate(extension(token))
    assert peer_node_id(cert) == ident.node_id  # still self-signed, extension covered
    ext = cert.extensions.get_extension_for_oid(OID)
    assert not ext.critical
    assert token_from_certificate(cert) == token
    assert admitted_until(cert, cluster.public_key(), ident.node_id, NOW) is None
    assert token_from_certificate(ident.certificate()) is None  # no token
    with pytest.raises(MembershipError, match="no membership token"):
        admitted_until(ident.certificate(), cluster.public_key(), ident.node_id, NOW)
    timed = make_token(cluster, ident.node_id, int(NOW) + 5)
    until = admitted_until(ident.certificate(extension(timed)), cluster.public_key(),
                           ident.node_id, NOW)
    assert until == NOW + 5
    # certificates are cached per extension
    assert ident.certificate(extension(token)) is cert
    assert ident.certificate() is ident.certificate()


@pytest.mark.parametrize("value", [b"", b"\x04", b"\x04\x69" + bytes(104),
                                   b"\x04\x69" + bytes(106), b"\x05\x69" + bytes(105),
                                   b"\x04\x81\x69" + bytes(105), bytes(EXTENSION_LEN)])
def test_malformed_extension_values_are_refused(value: bytes) -> None:
    with pytest.raises(MembershipError):
        token_from_extension_value(value)
    ident = NodeIdentity.generate()
    cert = ident.certificate(x509.UnrecognizedExtension(OID, value))
    with pytest.raises(MembershipError):
        token_from_certificate(cert)


def test_public_key_forms(tmp_path: Path, cluster: ed25519.Ed25519PrivateKey) -> None:
    pub = cluster.public_key()
    raw = pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    pem = pub.public_bytes(serialization.Encoding.PEM,
                           serialization.PublicFormat.SubjectPublicKeyInfo)
    path = tmp_path / "cluster.pub"
    path.write_bytes(pem)
    for text in (raw.hex(), raw.hex().upper(), base64.b64encode(raw).decode(),
                 base64.b64encode(raw).decode().rstrip("="),
                 base64.urlsafe_b64encode(raw).decode(), pem.decode(), str(path),
                 f"  {raw.hex()}\n"):
        assert public_hex(parse_public_key(text)) == raw.hex(), text
    for bad in ("", "zz" * 32, "abcd", str(tmp_path / "missing.pub")):
        with pytest.raises(MembershipError):
            parse_public_key(bad)
    (tmp_path / "big").write_bytes(b"x" * 10_000)
    with pytest.raises(MembershipError, match="too big"):
        parse_public_key(str(tmp_path / "big"))
    (tmp_path / "rsa.pem").write_text("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----")
    with pytest.raises(MembershipError, match="not a PEM public key"):
        parse_public_key(str(tmp_path / "rsa.pem"))


def test_token_file_round_trip_and_checks(tmp_path: Path,
                                          cluster: ed25519.Ed25519PrivateKey) -> None:
    ident = NodeIdentity.generate()
    token = make_token(cluster, ident.node_id, int(NOW) + 3600)
    path = tmp_path / MEMBERSHIP_FILE
    write_token_file(path, token)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert to_base32(ident.node_id) in path.read_text()  # the comment names the node
    assert read_token_file(path) == token
    write_token_file(path, make_token(cluster, ident.node_id))  # re-signing replaces it
    assert read_token_file(path).expires_at == 0
    assert [p.name for p in tmp_path.iterdir()] == [MEMBERSHIP_FILE]  # no temp file left
    pub = cluster.public_key()
    assert load_own_token(path, ident.node_id, pub, explicit=True) is not None
    assert load_own_token(tmp_path / "none", ident.node_id, pub, explicit=False) is None
    with pytest.raises(MembershipError, match="cannot read"):
        load_own_token(tmp_path / "none", ident.node_id, pub, explicit=True)
    other = NodeIdentity.generate().node_id
    with pytest.raises(MembershipError, match="the token is for node"):
        load_own_token(path, other, pub, explicit=False)
    stranger = ed25519.Ed25519PrivateKey.generate().public_key()
    with pytest.raises(MembershipError, match="not signed by the cluster key"):
        load_own_token(path, ident.node_id, stranger, explicit=False)
    for junk in (b"not base64!", base64.b64encode(b"short"), b"y" * 5000):
        path.write_bytes(junk)
        with pytest.raises(MembershipError):
            read_token_file(path)


def test_load_admission(tmp_path: Path, cluster: ed25519.Ed25519PrivateKey,
                        caplog: pytest.LogCaptureFixture) -> None:
    ident = NodeIdentity.generate()
    pub_hex = public_hex(cluster.public_key())
    assert load_admission("", None, str(tmp_path), ident.node_id, NOW) == (None, None)
    key, token = load_admission(pub_hex, None, str(tmp_path), ident.node_id, NOW)
    assert key is not None and token is None
    expired = make_token(cluster, ident.node_id, int(NOW) - 1)
    write_token_file(tmp_path / MEMBERSHIP_FILE, expired)
    _, token = load_admission(pub_hex, "", str(tmp_path), ident.node_id, NOW)
    assert token == expired
    assert "expired" in caplog.text
    elsewhere = tmp_path / "elsewhere.token"
    with pytest.raises(MembershipError, match="cannot read"):
        load_admission(pub_hex, str(elsewhere), str(tmp_path), ident.node_id, NOW)


def test_parse_expiry() -> None:
    assert parse_expiry(None, NOW) == 0 and parse_expiry("never", NOW) == 0
    assert parse_expiry("90d", NOW) == int(NOW) + 90 * 86400
    assert parse_expiry("12h", NOW) == int(NOW) + 12 * 3600
    assert parse_expiry("2099-01-01T00:00:00", NOW) == 4070908800
    assert parse_expiry("2099-01-01T01:00:00+01:00", NOW) == 4070908800


def test_cli_keygen_and_sign(tmp_path: Path) -> None:
    runner = CliRunner()
    key_path = tmp_path / "cluster.key"
    result = runner.invoke(mesh_app, ["keygen", "--out", str(key_path)])
    assert result.exit_code == 0, result.output
    pub_hex = result.stdout.strip().splitlines()[0]
    assert len(pub_hex) == 64
    assert stat.S_IMODE(os.stat(key_path).st_mode) == 0o600
    assert public_hex(load_cluster_key(key_path).public_key()) == pub_hex
    assert public_hex(parse_public_key(str(key_path) + ".pub")) == pub_hex
    again = runner.invoke(mesh_app, ["keygen", "--out", str(key_path)])
    assert again.exit_code == 1 and "not overwriting" in again.output

    data = tmp_path / "node1"
    signed = runner.invoke(mesh_app, ["sign", "--cluster-key", str(key_path),
                                      "--data-dir", str(data), "--expires", "30d"])
    assert signed.exit_code == 0, signed.output
    ident = NodeIdentity.load_or_create(data)
    token = read_token_file(data / MEMBERSHIP_FILE)
    assert stat.S_IMODE(os.stat(data / MEMBERSHIP_FILE).st_mode) == 0o600
    assert to_base32(ident.node_id) in signed.stdout
    verify_token(token, parse_public_key(pub_hex), ident.node_id, NOW)
    assert token.expires_at > NOW

    other = NodeIdentity.generate()
    out = tmp_path / "other.token"
    by_id = runner.invoke(mesh_app, ["sign", "--cluster-key", str(key_path), "--node-id",
                                     other.node_id.hex(), "--out", str(out)])
    assert by_id.exit_code == 0, by_id.output
    assert read_token_file(out).node_id == other.node_id

    usage = runner.invoke(mesh_app, ["sign", "--cluster-key", str(key_path), "--node-id",
                                     other.node_id.hex()])
    assert usage.exit_code == 2
    both = runner.invoke(mesh_app, ["sign", "--cluster-key", str(key_path)])
    assert both.exit_code == 2
    bad_expiry = runner.invoke(mesh_app, ["sign", "--cluster-key", str(key_path),
                                          "--data-dir", str(data), "--expires", "yesterday"])
    assert bad_expiry.exit_code == 2
    os.chmod(key_path, 0o644)
    loose = runner.invoke(mesh_app, ["sign", "--cluster-key", str(key_path),
                                     "--data-dir", str(data)])
    assert loose.exit_code == 1 and "chmod 600" in loose.output


def test_settings_are_checked_when_the_config_loads(
        tmp_path: Path, cluster: ed25519.Ed25519PrivateKey) -> None:
    from eddy.config import ConfigError, load_config

    pub_hex = public_hex(cluster.public_key())
    token_path = tmp_path / "t.membership"
    write_token_file(token_path, make_token(cluster, bytes(32)))
    cfg = load_config(env={}, overrides={"mesh.cluster.public.key": pub_hex,
                                         "mesh.membership.file": str(token_path)})
    assert cfg.mesh_cluster_public_key == pub_hex
    assert cfg.mesh_membership_file == str(token_path)
    assert load_config(env={}).mesh_cluster_public_key == ""
    with pytest.raises(ConfigError, match="expected 64 hex digits"):
        load_config(env={}, overrides={"mesh.cluster.public.key": "abc"})
    with pytest.raises(ConfigError, match="cannot read the membership token"):
        load_config(env={}, overrides={"mesh.membership.file": str(tmp_path / "none")})

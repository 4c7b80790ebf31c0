"""The mesh's admission checks under fuzzing (issue 16): the bytes are taken as a membership
token's certificate extension value and as a peer's DER certificate, and checked the way the
transport checks a peer after the TLS handshake (`peer_node_id`, then `admitted_until`
against a fixed cluster key). Only ``MembershipError`` and ``IdentityError`` are documented
(and cryptography's ``ValueError`` for bytes that are no certificate at all); anything else
escaping is a finding, and so is a decoded token that does not re-encode to its bytes."""

from __future__ import annotations

import contextlib

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from eddy.mesh.identity import IdentityError, NodeIdentity, peer_node_id
from eddy.mesh.membership import (
    MembershipError,
    admitted_until,
    extension,
    make_token,
    token_from_extension_value,
    verify_token,
)

CLUSTER = ed25519.Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
NODE = NodeIdentity(ed25519.Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33))))


class TokenNotCanonical(AssertionError):
    """A token decoded from bytes it does not re-encode to."""


def check_membership(data: bytes) -> None:
    """The fuzz target: returns for every documented outcome, raises anything else."""
    public = CLUSTER.public_key()
    with contextlib.suppress(MembershipError):
        token = token_from_extension_value(data)
        if extension(token).value != data:
            raise TokenNotCanonical(f"{data.hex()} re-encodes as {extension(token).value.hex()}")
        verify_token(token, public, token.node_id, 0.0)
    try:  # cryptography's parse (aioquic's, on the wire): not the code under test
        cert = x509.load_der_x509_certificate(data)
    except (ValueError, x509.InvalidVersion):
        return
    with contextlib.suppress(IdentityError, MembershipError):
        peer = peer_node_id(cert)
        admitted_until(cert, public, peer, 0.0)


def membership_seeds() -> list[bytes]:
    """A valid extension value (with and without expiry), a certificate carrying it, and
    one without a token."""
    never, timed = make_token(CLUSTER, NODE.node_id), make_token(CLUSTER, NODE.node_id, 99)
    der = serialization.Encoding.DER
    return [extension(never).value, extension(timed).value,
            NODE.certificate(extension(never)).public_bytes(der),
            NODE.certificate().public_bytes(der)]

"""The client side of TLS, for the node's own connections to a TLS inter-broker listener
(a follower's ``LeaderLink``, the registry's Kafka client).

The CA certificates trusted are ``ssl.truststore.*`` when set, else the CA chain of the
node's own keystore (the certificates after the first of its chain; a chain of one,
self-signed, trusts itself): nodes whose certificates come from one CA then need no trust
store. The node's own certificate is presented when the listeners ask for client
certificates (``ssl.client.auth`` requested or required). The host name (or IP address) a
peer is reached at is checked against its certificate, as Kafka's default
``ssl.endpoint.identification.algorithm=https`` does.

The PEM loading is the listeners' (``eddy.security.tls``): the same settings, the same
errors (``TlsError`` naming the setting, never a key).
"""

from __future__ import annotations

import ssl

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from eddy.security.tls import TlsError, TlsMaterial, _is_pem, _load_chain, _load_trust, _read

__all__ = ["client_context", "own_certificates", "trusted_pem", "truststore_text",
           "wants_client_cert"]


def wants_client_cert(material: TlsMaterial) -> bool:
    """Whether the listeners ask clients for a certificate (so the node presents its own)."""
    return material.client_auth in ("requested", "required")


def own_certificates(material: TlsMaterial) -> list[x509.Certificate]:
    """The node's certificate chain (leaf first); [] without keystore material."""
    if material.certificate_chain is not None:
        text = _read(material.certificate_chain, "ssl.keystore.certificate.chain")
        setting = "ssl.keystore.certificate.chain"
    elif material.keystore_location is not None:
        text = _read(material.keystore_location, "ssl.keystore.location")
        setting = "ssl.keystore.location"
    else:
        return []
    try:
        return x509.load_pem_x509_certificates(text.encode())
    except ValueError:
        raise TlsError(f"{setting}: no PEM certificate in it") from None


def _keystore_ca_pem(material: TlsMaterial) -> str:
    chain = own_certificates(material)
    if not chain:
        raise TlsError("the inter-broker listener uses TLS: set ssl.truststore.location or "
                       "ssl.truststore.certificates (the CA certificates the other nodes' "
                       "certificates are checked with), or a keystore whose chain holds the CA")
    cas = chain[1:] or chain[:1]
    return "".join(c.public_bytes(Encoding.PEM).decode() for c in cas)


def trusted_pem(material: TlsMaterial) -> str | None:
    """PEM text of the CA certificates the node's client trusts when it comes from the
    keystore chain; None when ``ssl.truststore.*`` is set (the files/text given are used)."""
    if material.truststore_location is not None or material.truststore_certificates is not None:
        return None
    return _keystore_ca_pem(material)


def truststore_text(material: TlsMaterial) -> str | None:
    """ssl.truststore.certificates as PEM text when it holds text (not a path)."""
    value = material.truststore_certificates
    return value if value is not None and _is_pem(value) else None


def client_context(material: TlsMaterial, scratch_dir: str) -> ssl.SSLContext:
    """An SSLContext for connecting to the other nodes' TLS listeners; TlsError naming the
    setting when the material does not load."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = True
    ctx.verify_mode = ssl.CERT_REQUIRED
    keystore_cas = trusted_pem(material)
    if keystore_cas is None:
        _load_trust(ctx, material)
    else:
        try:
            ctx.load_verify_locations(cadata=keystore_cas)
        except (ssl.SSLError, ValueError) as exc:
            raise TlsError(f"ssl.keystore: its CA certificates do not load: {exc}") from None
        # the chain's CA may be an intermediate: it is the anchor, not a root beyond it
        ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    if wants_client_cert(material):
        _load_chain(ctx, material, scratch_dir)
    return ctx

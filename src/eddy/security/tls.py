"""TLS of the Kafka listeners from PEM material as Kafka takes it (KIP-651), with the
client's principal read from its certificate and the material reloaded when its files change.

Each PEM setting is PEM text or the path of a PEM file. The stdlib loads a key and chain
from files only: inline text goes to a 0600 file in the data dir for the load and is
removed at once. A reload loads the new key and chain (and any added CA certificates) into
the same ``ssl.SSLContext``, so the listener keeps its socket and new connections get the
new material; connections already open keep theirs. A CA removed from the trust store is
only forgotten on restart (OpenSSL adds trust anchors, it does not drop them).
"""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509

__all__ = ["TlsContext", "TlsError", "TlsMaterial", "principal_of"]

log = logging.getLogger(__name__)

_VERIFY = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
           "required": ssl.CERT_REQUIRED}


class TlsError(OSError):
    """PEM material that cannot be loaded; the message names the setting, never the key.
    An OSError: like a port already taken, the node cannot start (``eddy serve`` says so)."""


@dataclass(frozen=True, slots=True)
class TlsMaterial:
    """The ssl.* settings a listener's context is built from (values as configured)."""

    keystore_location: str | None
    certificate_chain: str | None
    key: str | None
    key_password: str | None
    truststore_location: str | None
    truststore_certificates: str | None
    client_auth: str  # none, requested, required

    @classmethod
    def from_config(cls, config: Any) -> TlsMaterial:
        def secret(value: Any) -> str | None:
            return None if value is None else str(value.get_secret_value())

        return cls(config.ssl_keystore_location, config.ssl_keystore_certificate_chain,
                   secret(config.ssl_keystore_key), secret(config.ssl_key_password),
                   config.ssl_truststore_location, config.ssl_truststore_certificates,
                   config.ssl_client_auth.lower())

    def files(self) -> list[str]:
        """The paths whose changes trigger a reload."""
        out = [self.keystore_location, self.truststore_location]
        out += [v for v in (self.certificate_chain, self.key, self.truststore_certificates)
                if v is not None and not _is_pem(v)]
        return [p for p in out if p is not None]


def _is_pem(value: str) -> bool:
    return value.lstrip().startswith("-----BEGIN")


def _read(value: str, setting: str) -> str:
    """PEM text of a setting holding text or a path."""
    if _is_pem(value):
        return value
    try:
        return Path(value).read_text()
    except (OSError, UnicodeError) as exc:
        raise TlsError(f"{setting}: cannot read {value}: "
                       f"{getattr(exc, 'strerror', None) or exc}") from None


@contextlib.contextmanager
def _as_file(text: str, directory: str) -> Iterator[str]:
    """``text`` in a 0600 file of ``directory`` while the block runs."""
    os.makedirs(directory, exist_ok=True)
    fd, path = tempfile.mkstemp(prefix=".tls-", suffix=".pem", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _load_chain(ctx: ssl.SSLContext, material: TlsMaterial, scratch_dir: str) -> None:
    password = material.key_password
    try:
        if material.certificate_chain is not None and material.key is not None:
            chain = _read(material.certificate_chain, "ssl.keystore.certificate.chain")
            key = _read(material.key, "ssl.keystore.key")
            with _as_file(chain + "\n" + key, scratch_dir) as path:
                ctx.load_cert_chain(path, password=password)
        elif material.keystore_location is not None:
            ctx.load_cert_chain(material.keystore_location, password=password)
        else:
            raise TlsError("set ssl.keystore.location, or ssl.keystore.certificate.chain and "
                           "ssl.keystore.key")
    except ssl.SSLError as exc:
        raise TlsError(f"ssl.keystore: the certificate chain and private key do not load "
                       f"({exc.reason or exc.library or 'bad PEM'}; an encrypted key needs "
                       "ssl.key.password)") from None
    except OSError as exc:
        raise TlsError(f"ssl.keystore.location: {exc.strerror or exc}") from None


def _load_trust(ctx: ssl.SSLContext, material: TlsMaterial) -> None:
    try:
        if material.truststore_certificates is not None:
            text = _read(material.truststore_certificates, "ssl.truststore.certificates")
            ctx.load_verify_locations(cadata=text)
        if material.truststore_location is not None:
            ctx.load_verify_locations(cafile=material.truststore_location)
    except (ssl.SSLError, ValueError) as exc:
        raise TlsError(f"ssl.truststore: the CA certificates do not load: {exc}") from None
    except OSError as exc:
        raise TlsError(f"ssl.truststore.location: {exc.strerror or exc}") from None


def _mtimes(paths: list[str]) -> dict[str, int]:
    out = {}
    for p in paths:
        try:
            out[p] = os.stat(p).st_mtime_ns
        except OSError:
            out[p] = -1
    return out


class TlsContext:
    """The server-side SSLContext of the TLS listeners, reloaded in place when a PEM
    file's modification time changes (checked at most every ``check_s`` seconds)."""

    def __init__(self, material: TlsMaterial, scratch_dir: str, check_s: float) -> None:
        self.material = material
        self._scratch = scratch_dir
        self._check_s = check_s
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context.verify_mode = _VERIFY[material.client_auth]
        _load_chain(self.context, material, scratch_dir)
        _load_trust(self.context, material)
        self._stamps = _mtimes(material.files())
        self._checked = 0.0
        self.reloads = 0

    def maybe_reload(self, now: float) -> bool:
        """Reload if due and a file changed; True if the material was reloaded. A reload
        that fails keeps the material in force and logs why."""
        if self._check_s <= 0 or now - self._checked < self._check_s:
            return False
        self._checked = now
        stamps = _mtimes(self.material.files())
        if stamps == self._stamps:
            return False
        self._stamps = stamps
        try:
            _load_chain(self.context, self.material, self._scratch)
            _load_trust(self.context, self.material)
        except TlsError as exc:
            log.error("TLS material changed but does not load; keeping the previous: %s", exc)
            return False
        self.reloads += 1
        log.info("TLS material reloaded (new connections use it)")
        return True


def principal_of(transport: Any) -> str | None:
    """``User:<subject>`` of a verified client certificate (the subject in RFC 4514/2253
    form, as Kafka's default principal builder writes it), or None without one."""
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    try:
        cert = x509.load_der_x509_certificate(der)
    except ValueError:
        return None
    return "User:" + cert.subject.rfc4514_string()

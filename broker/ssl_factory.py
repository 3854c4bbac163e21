"""SslFactory: the TLS context of the SSL listeners, from Kafka's ``ssl.*`` broker configs.

Kafka's DefaultSslEngineFactory reads JKS, PKCS12 and PEM stores; a JKS store is a Java format
that only a JVM reads, so kbroker takes PEM and PKCS12 ones and says how to convert a JKS store.
A PEM keystore is a file with the private key and the certificate chain (``ssl.keystore.location``)
or both given inline (``ssl.keystore.key``, ``ssl.keystore.certificate.chain``); ``ssl.key.password``
decrypts an encrypted key. Python's ssl module loads a certificate chain only from a file, so a
store given inline or as PKCS12 is written, unencrypted, to a private temporary directory for the
moment of the load and removed at once.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, pkcs12

from broker.security.ssl_principal_mapper import SslPrincipalMapper

if TYPE_CHECKING:
    from broker.config import BrokerConfig

TLS_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
STORE_TYPES = ("PEM", "PKCS12")
JKS_ADVICE = "a JKS store is read only by a JVM: convert it with keytool -importkeystore -deststoretype PKCS12, or give PEM"

# ssl.cipher.suites names suites as Java does, in the IANA spelling; OpenSSL has names of its own
# for TLS 1.2 and below. No library short of a TLS scanner with an OpenSSL of its own (sslyze) maps
# one to the other, so the suites JSSE offers whose parts OpenSSL also has (ECDHE/DHE/RSA key
# exchange, RSA/ECDSA/DSS authentication, AES-GCM, AES-CBC, ChaCha20-Poly1305) are translated by
# their parts, and each translation is then checked against what the context offers, name and
# parts. TLS 1.3 suites have the same name everywhere.
_IANA_SUITE = re.compile(
    r"TLS_(?:(?P<kx>ECDHE|DHE)_(?P<auth>RSA|ECDSA|DSS)|RSA)_WITH_"
    r"(?:AES_(?P<bits>128|256)_(?P<mode>GCM|CBC)_(?P<mac>SHA|SHA256|SHA384)|(?P<chacha>CHACHA20_POLY1305)_SHA256)"
)
_CBC_DIGESTS = {"SHA": "sha1", "SHA256": "sha256", "SHA384": "sha384"}
# Java lists this signalling value as a suite; OpenSSL always sends the extension it stands for.
_RENEGOTIATION_SCSV = "TLS_EMPTY_RENEGOTIATION_INFO_SCSV"


class SslConfigError(ValueError):
    """A listener's TLS settings that cannot work; the message names the config."""


def check_ssl_config(cfg: BrokerConfig) -> None:
    """Refuse at start-up what would fail at the first handshake: the stores are loaded once."""
    server_context(cfg)
    try:
        SslPrincipalMapper(cfg.ssl_principal_mapping_rules)
    except ValueError as e:
        raise SslConfigError(f"ssl.principal.mapping.rules: {e}") from None


def server_context(cfg: BrokerConfig) -> ssl.SSLContext:
    """The context every SSL listener of this broker serves with."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _set_protocols_and_suites(context, cfg)
    _load_keystore(context, cfg)
    if cfg.ssl_client_auth != "none":
        if not _load_truststore(context, cfg):
            raise SslConfigError(f"ssl.client.auth={cfg.ssl_client_auth} needs a truststore: set ssl.truststore.location or ssl.truststore.certificates")
        context.verify_mode = ssl.CERT_REQUIRED if cfg.ssl_client_auth == "required" else ssl.CERT_OPTIONAL
    return context


def client_context(cfg: BrokerConfig) -> ssl.SSLContext:
    """This node's context for its own connections to another node's TLS listener: the listener's
    truststore checks the other node, its keystore (when it has one) is this node's certificate for
    a listener that asks for one, and ssl.endpoint.identification.algorithm=https checks that the
    certificate names the host connected to."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _set_protocols_and_suites(context, cfg)
    if not _load_truststore(context, cfg):
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if cfg.ssl_keystore_location is not None or cfg.ssl_keystore_key is not None:
        _load_keystore(context, cfg)
    algorithm = cfg.ssl_endpoint_identification_algorithm.strip().lower()
    if algorithm not in ("", "https"):
        raise SslConfigError(f"ssl.endpoint.identification.algorithm {cfg.ssl_endpoint_identification_algorithm}: expected https or empty")
    context.check_hostname = algorithm == "https"
    return context


def _set_protocols_and_suites(context: ssl.SSLContext, cfg: BrokerConfig) -> None:
    """ssl.enabled.protocols and ssl.cipher.suites, as Java's SSLEngine would negotiate them.

    Python's ssl module restricts the suites of TLS 1.2 and below (``set_ciphers``) but not those of
    TLS 1.3, which OpenSSL keeps at its defaults. Java negotiates only a protocol that has an enabled
    suite, so a list without a TLS 1.3 suite caps the context at TLS 1.2, and one with only TLS 1.3
    suites raises its floor to TLS 1.3. A list naming some but not all of the TLS 1.3 suites OpenSSL
    offers cannot be honoured: it is refused rather than silently widened. A list that leaves no
    enabled protocol, or names a suite OpenSSL does not offer, is refused at start-up too: Kafka
    4.4 starts with such a list and then fails every connection of the listener ("Unsupported
    CipherSuite"), which serves no one."""
    versions = _enabled_versions(cfg.ssl_enabled_protocols)
    low, high = min(versions), max(versions)
    suites = [s.strip() for s in cfg.ssl_cipher_suites.split(",") if s.strip()]
    if suites:
        tls13_offered = [c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.3"]
        tls13 = [s for s in suites if s in tls13_offered]
        older = [s for s in suites if s not in tls13 and s != _RENEGOTIATION_SCSV]
        if tls13 and set(tls13) != set(tls13_offered):
            missing = ", ".join(s for s in tls13_offered if s not in tls13)
            raise SslConfigError(
                f"ssl.cipher.suites names {', '.join(tls13)} but not {missing}: kbroker cannot restrict TLS 1.3 suites"
                " (OpenSSL through Python's ssl module), so list all of them or none (none turns TLS 1.3 off)"
            )
        if older:
            _set_older_suites(context, older)
        if not tls13:
            high = min(high, ssl.TLSVersion.TLSv1_2)
        if not older:
            low = max(low, ssl.TLSVersion.TLSv1_3)
        if low > high:
            kinds = "only TLS 1.3 suites" if tls13 else "no TLS 1.3 suite"
            raise SslConfigError(f"ssl.cipher.suites names {kinds} and ssl.enabled.protocols is {cfg.ssl_enabled_protocols}: no protocol is left to negotiate")
    context.minimum_version, context.maximum_version = low, high


def _set_older_suites(context: ssl.SSLContext, suites: list[str]) -> None:
    """Enable exactly these TLS 1.2-and-below suites, in the order listed."""
    names = {suite: _openssl_name(suite) for suite in suites}
    try:
        context.set_ciphers(":".join(n for n in names.values() if n is not None))
        offered = {c["name"]: c for c in context.get_ciphers()}
    except ssl.SSLError:  # none of them: OpenSSL refuses an empty list
        offered = {}
    for suite, name in names.items():
        if name is None or name not in offered or not _has_parts(offered[name], suite):
            shown = suite if name is None else f"{suite} (OpenSSL's {name})"
            raise SslConfigError(f"ssl.cipher.suites: {shown} is not a cipher suite the local {ssl.OPENSSL_VERSION} offers")


def _openssl_name(suite: str) -> str | None:
    """OpenSSL's name of a TLS 1.2-and-below suite named as IANA and Java name it, if its parts are known."""
    m = _IANA_SUITE.fullmatch(suite)
    if m is None:
        return None
    prefix = f"{m['kx']}-{m['auth']}-" if m["kx"] else ""  # static RSA key exchange goes unnamed
    if m["chacha"]:
        return prefix + "CHACHA20-POLY1305"
    # CBC suites are named by their MAC alone; GCM ones by the mode and the PRF's hash.
    return prefix + f"AES{m['bits']}-" + ("GCM-" if m["mode"] == "GCM" else "") + m["mac"]


def _has_parts(cipher: Mapping[str, object], suite: str) -> bool:
    """Whether what OpenSSL says of the cipher (key exchange, authentication, encryption, MAC) is what
    the IANA name says: a check that the translation picked the suite it meant."""
    m = _IANA_SUITE.fullmatch(suite)
    assert m is not None
    kx, auth = (m["kx"], m["auth"]) if m["kx"] else ("RSA", "RSA")
    symmetric = "chacha20-poly1305" if m["chacha"] else f"aes-{m['bits']}-{m['mode'].lower()}"
    digest = _CBC_DIGESTS[m["mac"]] if m["mode"] == "CBC" else None
    return (cipher["kea"], cipher["auth"], cipher["symmetric"], cipher["digest"]) == (f"kx-{kx.lower()}", f"auth-{auth.lower()}", symmetric, digest)


def _enabled_versions(value: str) -> list[ssl.TLSVersion]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in TLS_VERSIONS]
    if unknown or not names:
        raise SslConfigError(f"ssl.enabled.protocols: {', '.join(unknown) or 'empty'}; expected some of {', '.join(TLS_VERSIONS)}")
    return [TLS_VERSIONS[n] for n in names]


def _load_keystore(context: ssl.SSLContext, cfg: BrokerConfig) -> None:
    kind = cfg.ssl_keystore_type.upper()
    inline = cfg.ssl_keystore_key is not None or cfg.ssl_keystore_certificate_chain is not None
    if not inline and cfg.ssl_keystore_location is None:
        raise SslConfigError("an SSL listener needs a keystore: set ssl.keystore.location (or ssl.keystore.key and ssl.keystore.certificate.chain)")
    if kind not in STORE_TYPES:
        raise SslConfigError(f"ssl.keystore.type {cfg.ssl_keystore_type} is not supported: {JKS_ADVICE}" if kind == "JKS" else f"ssl.keystore.type {cfg.ssl_keystore_type}: expected PEM or PKCS12")
    if inline and kind != "PEM":
        raise SslConfigError("ssl.keystore.key and ssl.keystore.certificate.chain are PEM: set ssl.keystore.type=PEM")
    if inline and cfg.ssl_keystore_location is not None:
        raise SslConfigError("ssl.keystore.location and ssl.keystore.key cannot both be set")
    if inline and (cfg.ssl_keystore_key is None or cfg.ssl_keystore_certificate_chain is None):
        raise SslConfigError("ssl.keystore.key and ssl.keystore.certificate.chain go together")
    if kind == "PEM" and cfg.ssl_keystore_password is not None:
        raise SslConfigError("ssl.keystore.password cannot be set for a PEM keystore: only ssl.key.password (of an encrypted key) may be")
    try:
        if kind == "PEM" and cfg.ssl_keystore_location is not None:
            context.load_cert_chain(cfg.ssl_keystore_location, password=cfg.ssl_key_password)
        elif kind == "PEM":
            assert cfg.ssl_keystore_key is not None and cfg.ssl_keystore_certificate_chain is not None
            _load_chain_from_text(context, _pem_block(cfg.ssl_keystore_key) + _pem_block(cfg.ssl_keystore_certificate_chain), cfg.ssl_key_password)
        else:
            assert cfg.ssl_keystore_location is not None
            _load_chain_from_text(context, _pkcs12_as_pem(cfg), None)
    except (OSError, ValueError) as e:
        raise SslConfigError(f"ssl.keystore: cannot load the key and certificate chain ({e})") from None


def _pkcs12_as_pem(cfg: BrokerConfig) -> str:
    assert cfg.ssl_keystore_location is not None
    password = cfg.ssl_key_password if cfg.ssl_key_password is not None else cfg.ssl_keystore_password
    key, cert, chain = pkcs12.load_key_and_certificates(Path(cfg.ssl_keystore_location).read_bytes(), password.encode() if password else None)
    if key is None or cert is None:
        raise ValueError(f"{cfg.ssl_keystore_location} holds no private key entry")
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    return pem + "".join(c.public_bytes(Encoding.PEM).decode() for c in [cert, *chain])


def _load_chain_from_text(context: ssl.SSLContext, pem: str, password: str | None) -> None:
    with tempfile.TemporaryDirectory(prefix="kbroker-ssl-") as directory:
        path = os.path.join(directory, "keystore.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(pem)
        context.load_cert_chain(path, password=password)


def _pem_block(text: str) -> str:
    """A PEM value as a properties file gives it: possibly on one line with escaped newlines."""
    return text.replace("\\n", "\n").strip() + "\n"


def _load_truststore(context: ssl.SSLContext, cfg: BrokerConfig) -> bool:
    """Load the CAs client certificates must chain to; False when none is configured."""
    if cfg.ssl_truststore_location is None and cfg.ssl_truststore_certificates is None:
        return False
    kind = cfg.ssl_truststore_type.upper()
    if kind not in STORE_TYPES:
        raise SslConfigError(f"ssl.truststore.type {cfg.ssl_truststore_type} is not supported: {JKS_ADVICE}" if kind == "JKS" else f"ssl.truststore.type {cfg.ssl_truststore_type}: expected PEM or PKCS12")
    try:
        if cfg.ssl_truststore_certificates is not None:
            context.load_verify_locations(cadata=_pem_block(cfg.ssl_truststore_certificates))
        elif kind == "PEM":
            context.load_verify_locations(cafile=cfg.ssl_truststore_location)
        else:
            assert cfg.ssl_truststore_location is not None
            password = cfg.ssl_truststore_password.encode() if cfg.ssl_truststore_password else None
            store = pkcs12.load_pkcs12(Path(cfg.ssl_truststore_location).read_bytes(), password)
            certs = [c.certificate for c in store.additional_certs] + ([store.cert.certificate] if store.cert else [])
            if not certs:
                raise ValueError(f"{cfg.ssl_truststore_location} holds no certificate")
            context.load_verify_locations(cadata="".join(c.public_bytes(Encoding.PEM).decode() for c in certs))
    except (OSError, ValueError) as e:
        raise SslConfigError(f"ssl.truststore: cannot load the trusted certificates ({e})") from None
    return True



def keystore_certificate(cfg: BrokerConfig) -> x509.Certificate:
    """The keystore's own certificate (the first of its chain)."""
    if cfg.ssl_keystore_type.upper() == "PKCS12":
        return x509.load_pem_x509_certificates(_pkcs12_as_pem(cfg).encode())[0]
    if cfg.ssl_keystore_location is not None:
        text = Path(cfg.ssl_keystore_location).read_text()
    else:
        assert cfg.ssl_keystore_certificate_chain is not None
        text = _pem_block(cfg.ssl_keystore_certificate_chain)
    return x509.load_pem_x509_certificates(text.encode())[0]

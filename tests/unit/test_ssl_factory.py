"""SslFactory: each way Kafka's ssl.* configs give a store, a handshake through the context it
builds (in memory, both ends), ssl.cipher.suites in Java's spelling, and the settings it refuses
with one line naming the config."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, pkcs12

from broker.config import BrokerConfig
from broker.ssl_factory import SslConfigError, check_ssl_config, server_context
from broker.ssl_factory import client_context as node_client_context
from tests.integration.certificates import TestCA


def config(**ssl_props: str) -> BrokerConfig:
    return BrokerConfig.model_validate({"listeners": "PLAINTEXT://127.0.0.1:9092", **ssl_props})


def handshake(server: ssl.SSLContext, client: ssl.SSLContext, server_hostname: str = "localhost") -> ssl.SSLObject:
    """Run a TLS handshake between two in-memory ends; the server's end once done."""
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    c = client.wrap_bio(c_in, c_out, server_hostname=server_hostname)
    s = server.wrap_bio(s_in, s_out, server_side=True)
    done = {"c": False, "s": False}
    for _ in range(10):
        for name, end, out, peer_in in (("c", c, c_out, s_in), ("s", s, s_out, c_in)):
            if not done[name]:
                try:
                    end.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
            peer_in.write(out.read())
        if all(done.values()):
            # TLS 1.3: the server checks a client certificate when the client's last flight arrives.
            s.write(b"x")
            c_in.write(s_out.read())
            assert c.read(1) == b"x"
            return s
    raise AssertionError("handshake did not finish")


@pytest.fixture(scope="module")
def ca() -> TestCA:
    return TestCA()


def client_context(ca: TestCA, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=ca.cert_pem())
    if cert is not None:
        context.load_cert_chain(*map(str, cert))
    return context


def test_a_pem_keystore_file_with_an_encrypted_key(ca: TestCA, tmp_path: Path) -> None:
    keystore = ca.write_pem_keystore(ca.issue("localhost"), tmp_path / "ks.pem", key_password="s3cret")
    cfg = config(**{"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore), "ssl.key.password": "s3cret"})
    assert handshake(server_context(cfg), client_context(ca)).version() in ("TLSv1.2", "TLSv1.3")
    with pytest.raises(SslConfigError, match="ssl.keystore: cannot load"):
        server_context(config(**{"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore), "ssl.key.password": "wrong"}))


def test_a_pem_keystore_given_inline_as_a_properties_file_spells_it(ca: TestCA) -> None:
    issued = ca.issue("localhost")
    one_line = {"ssl.keystore.key": issued.key_pem().replace("\n", "\\n"), "ssl.keystore.certificate.chain": (issued.cert_pem() + ca.cert_pem()).replace("\n", "\\n")}
    handshake(server_context(config(**{"ssl.keystore.type": "PEM"}, **one_line)), client_context(ca))


def test_pkcs12_keystore_and_truststore_with_a_required_client_certificate(ca: TestCA, tmp_path: Path) -> None:
    keystore = ca.write_pkcs12_keystore(ca.issue("localhost"), tmp_path / "ks.p12", "store-pw")
    truststore = tmp_path / "ts.p12"
    truststore.write_bytes(pkcs12.serialize_key_and_certificates(None, None, None, [ca.cert], BestAvailableEncryption(b"trust-pw")))
    cfg = config(
        **{
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(keystore),
            "ssl.keystore.password": "store-pw",
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.location": str(truststore),
            "ssl.truststore.password": "trust-pw",
            "ssl.client.auth": "required",
        }
    )
    server = server_context(cfg)
    client = ca.issue("client-1", server=False)
    (tmp_path / "c.pem").write_text(client.cert_pem())
    (tmp_path / "c.key").write_text(client.key_pem())
    end = handshake(server, client_context(ca, (tmp_path / "c.pem", tmp_path / "c.key")))
    assert dict(x[0] for x in end.getpeercert()["subject"])["commonName"] == "client-1"
    with pytest.raises(ssl.SSLError):
        handshake(server, client_context(ca))


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({}, "ssl.keystore.type JKS is not supported: a JKS store is read only by a JVM"),
        ({"ssl.keystore.type": "PEM", "ssl.keystore.password": "x"}, "ssl.keystore.password cannot be set for a PEM keystore"),
        ({"ssl.keystore.type": "PEM", "ssl.keystore.key": "k"}, "ssl.keystore.location and ssl.keystore.key cannot both be set"),
        ({"ssl.keystore.type": "PEM", "ssl.client.auth": "required"}, "ssl.client.auth=required needs a truststore"),
        ({"ssl.keystore.type": "PEM", "ssl.client.auth": "requested", "ssl.truststore.location": "/nonexistent"}, "ssl.truststore.type JKS is not supported"),
        ({"ssl.keystore.type": "PEM", "ssl.enabled.protocols": "TLSv1.2,SSLv3"}, "ssl.enabled.protocols: SSLv3"),
        ({"ssl.keystore.type": "PKCS12", "ssl.keystore.password": "wrong"}, "ssl.keystore: cannot load"),
        ({"ssl.keystore.type": "PEM", "ssl.principal.mapping.rules": "DEFAULT/L"}, "ssl.principal.mapping.rules: Invalid rule"),
    ],
)
def test_settings_that_cannot_work_are_refused_naming_the_config(ca: TestCA, tmp_path: Path, props: dict[str, str], message: str) -> None:
    issued = ca.issue("localhost")
    location = ca.write_pkcs12_keystore(issued, tmp_path / "ks.p12", "pw") if props.get("ssl.keystore.type") == "PKCS12" else ca.write_pem_keystore(issued, tmp_path / "ks.pem")
    with pytest.raises(SslConfigError, match=message):
        check_ssl_config(config(**{"ssl.keystore.location": str(location), **props}))


def test_a_broker_with_an_ssl_listener_and_no_keystore_refuses_to_start_with_one_line() -> None:
    with pytest.raises(Exception, match="an SSL listener needs a keystore"):
        BrokerConfig.model_validate({"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093"})


def pem_config(ca: TestCA, tmp_path: Path, suites: str, **props: str) -> BrokerConfig:
    """A listener's settings with a PEM keystore (an ECDSA key) and ssl.cipher.suites."""
    keystore = ca.write_pem_keystore(ca.issue("localhost"), tmp_path / "ks.pem")
    return config(**{"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore), "ssl.cipher.suites": suites, **props})


def node_client(ca: TestCA, tmp_path: Path, suites: str) -> ssl.SSLContext:
    """A node's own client context (broker/ssl_factory.py), trusting the test CA."""
    return node_client_context(config(**{"ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.write_ca(tmp_path / "ca.pem")), "ssl.cipher.suites": suites}))


ECDSA_AES256 = "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"
ECDSA_AES128 = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"
TLS13 = "TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384,TLS_CHACHA20_POLY1305_SHA256"


def test_cipher_suites_in_java_spelling_become_openssl_suites_in_the_order_listed(ca: TestCA, tmp_path: Path) -> None:
    suites = "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256, TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256,TLS_DHE_RSA_WITH_AES_256_GCM_SHA384,TLS_RSA_WITH_AES_128_CBC_SHA,TLS_EMPTY_RENEGOTIATION_INFO_SCSV"
    context = server_context(pem_config(ca, tmp_path, suites))
    assert [c["name"] for c in context.get_ciphers() if c["protocol"] != "TLSv1.3"] == [
        "ECDHE-RSA-CHACHA20-POLY1305",
        "ECDHE-ECDSA-AES128-SHA256",
        "DHE-RSA-AES256-GCM-SHA384",
        "AES128-SHA",
    ]
    assert context.maximum_version == ssl.TLSVersion.TLSv1_2


def test_a_server_and_a_client_with_no_suite_in_common_do_not_connect(ca: TestCA, tmp_path: Path) -> None:
    server = server_context(pem_config(ca, tmp_path, ECDSA_AES256))
    with pytest.raises(ssl.SSLError):
        handshake(server, node_client(ca, tmp_path, ECDSA_AES128))
    end = handshake(server, node_client(ca, tmp_path, f"{ECDSA_AES128},{ECDSA_AES256}"))
    assert end.cipher()[:2] == ("ECDHE-ECDSA-AES256-GCM-SHA384", "TLSv1.2")


def test_a_list_without_tls13_suites_negotiates_tls12_as_java_does(ca: TestCA, tmp_path: Path) -> None:
    end = handshake(server_context(pem_config(ca, tmp_path, ECDSA_AES128)), client_context(ca))
    assert end.cipher()[:2] == ("ECDHE-ECDSA-AES128-GCM-SHA256", "TLSv1.2")


def test_a_list_of_the_tls13_suites_alone_negotiates_tls13_only(ca: TestCA, tmp_path: Path) -> None:
    server = server_context(pem_config(ca, tmp_path, TLS13))
    assert handshake(server, client_context(ca)).version() == "TLSv1.3"
    tls12_client = client_context(ca)
    tls12_client.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError):
        handshake(server, tls12_client)
    both = handshake(server_context(pem_config(ca, tmp_path, f"{TLS13},{ECDSA_AES128}")), tls12_client)
    assert both.cipher()[:2] == ("ECDHE-ECDSA-AES128-GCM-SHA256", "TLSv1.2")


@pytest.mark.parametrize(
    ("suites", "protocols", "message"),
    [
        ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_NO_SUCH_SUITE", "TLSv1.2,TLSv1.3", "ssl.cipher.suites: TLS_NO_SUCH_SUITE is not a cipher suite the local OpenSSL"),
        ("SSL_RSA_WITH_3DES_EDE_CBC_SHA", "TLSv1.2,TLSv1.3", "ssl.cipher.suites: SSL_RSA_WITH_3DES_EDE_CBC_SHA is not"),
        # No such suite: its translation is a name OpenSSL does not have.
        ("TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA256", "TLSv1.2,TLSv1.3", r"TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA256 \(OpenSSL's ECDHE-RSA-AES256-SHA256\) is not"),
        ("TLS_AES_128_CCM_SHA256", "TLSv1.2,TLSv1.3", "ssl.cipher.suites: TLS_AES_128_CCM_SHA256 is not"),
        ("TLS_AES_128_GCM_SHA256", "TLSv1.2,TLSv1.3", "ssl.cipher.suites names TLS_AES_128_GCM_SHA256 but not TLS_AES_256_GCM_SHA384, TLS_CHACHA20_POLY1305_SHA256: kbroker cannot restrict TLS 1.3 suites"),
        (ECDSA_AES128, "TLSv1.3", "ssl.cipher.suites names no TLS 1.3 suite and ssl.enabled.protocols is TLSv1.3: no protocol is left"),
        (TLS13, "TLSv1.2", "ssl.cipher.suites names only TLS 1.3 suites and ssl.enabled.protocols is TLSv1.2"),
    ],
)
def test_cipher_suites_that_cannot_be_served_are_refused_naming_the_suite(ca: TestCA, tmp_path: Path, suites: str, protocols: str, message: str) -> None:
    with pytest.raises(SslConfigError, match=message):
        check_ssl_config(pem_config(ca, tmp_path, suites, **{"ssl.enabled.protocols": protocols}))
    with pytest.raises(SslConfigError, match=message):
        node_client_context(pem_config(ca, tmp_path, suites, **{"ssl.enabled.protocols": protocols}))


def test_a_broker_whose_listener_names_an_unknown_suite_refuses_to_start_with_one_line(ca: TestCA, tmp_path: Path) -> None:
    keystore = ca.write_pem_keystore(ca.issue("localhost"), tmp_path / "ks.pem")
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
        "listener.name.ssl.ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    }
    with pytest.raises(ValueError, match="ssl.cipher.suites: TLS_ECDHE_ECDSA_WITH_RC4_128_SHA is not a cipher suite"):
        BrokerConfig.model_validate(props)
    BrokerConfig.model_validate({**props, "listener.name.ssl.ssl.cipher.suites": ECDSA_AES128})


@pytest.mark.parametrize("algorithm", ["https", ""])
def test_a_nodes_own_connections_check_the_other_nodes_host_name_unless_told_not_to(ca: TestCA, tmp_path: Path, algorithm: str) -> None:
    """ssl.endpoint.identification.algorithm: https (Kafka's default) refuses a certificate that
    does not name the host dialled; empty takes any the truststore vouches for."""
    server = server_context(pem_config(ca, tmp_path, ""))
    truststore = str(ca.write_ca(tmp_path / "ca.pem"))
    client = node_client_context(config(**{"ssl.truststore.type": "PEM", "ssl.truststore.location": truststore, "ssl.endpoint.identification.algorithm": algorithm}))
    handshake(server, client, "localhost")
    if algorithm:
        with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
            handshake(server, client, "kbroker-2.example")
    else:
        handshake(server, client, "kbroker-2.example")

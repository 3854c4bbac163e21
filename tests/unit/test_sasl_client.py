"""The SASL clients a node uses on its own links, each run against kbroker's server for its
mechanism, and against RFC 5802's SCRAM example; credentials the server refuses end the exchange."""

from __future__ import annotations

import pytest

from broker.security.oauthbearer_sasl_server import OAuthBearerSaslServer
from broker.security.plain_sasl_server import PlainSaslServer
from broker.security.sasl_client import SaslClient, SaslClientError, ScramSaslClient, sasl_client, unsecured_jwt
from broker.security.sasl_server import SaslAuthenticationError
from broker.security.scram import SCRAM_MECHANISMS, ScramMechanism, ScramSaslServer, new_credential


def run_exchange(client: SaslClient, server: object) -> str:
    """Both sides to the end, as SaslAuthenticate rounds carry them; the principal the server found."""
    message: bytes | None = client.initial_response()
    while message is not None:
        challenge = server.evaluate_response(message)  # type: ignore[attr-defined]
        message = client.evaluate_challenge(challenge)
    assert server.is_complete  # type: ignore[attr-defined]
    return server.authorization_id  # type: ignore[attr-defined,no-any-return]


def test_plain_sends_the_listener_credentials() -> None:
    client = sasl_client("PLAIN", {"username": "broker", "password": "broker-secret"})
    assert run_exchange(client, PlainSaslServer({"broker": "broker-secret"})) == "broker"
    with pytest.raises(SaslAuthenticationError):
        run_exchange(sasl_client("PLAIN", {"username": "broker", "password": "wrong"}), PlainSaslServer({"broker": "broker-secret"}))


@pytest.mark.parametrize("mechanism", sorted(SCRAM_MECHANISMS))
def test_scram_authenticates_and_checks_the_server_signature(mechanism: str) -> None:
    m = SCRAM_MECHANISMS[mechanism]
    credentials = {("broker", m.type_id): new_credential(m, "broker-secret")}
    client = sasl_client(mechanism, {"username": "broker", "password": "broker-secret"})
    assert run_exchange(client, ScramSaslServer(m, lambda user, kind: credentials.get((user, kind)))) == "broker"

    # A server that does not hold the password cannot sign the last message.
    impostor = ScramSaslClient(m, "broker", "broker-secret")
    server_first = ScramSaslServer(m, lambda user, kind: credentials.get((user, kind))).evaluate_response(impostor.initial_response())
    impostor.evaluate_challenge(server_first)
    with pytest.raises(SaslClientError, match="signature is wrong"):
        impostor.evaluate_challenge(b"v=" + b"A" * 44)


def test_scram_client_messages_are_rfc_5802s() -> None:
    """RFC 5802 section 5's example, with its SHA-1 parameters."""
    sha1 = ScramMechanism("SCRAM-SHA-1", 0, "sha1", min_iterations=4096)
    client = ScramSaslClient(sha1, "user", "pencil", nonce=lambda: "fyko+d2lbbFgONRv9qkxdawL")
    assert client.initial_response() == b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL"
    final = client.evaluate_challenge(b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096")
    assert final == b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
    assert client.evaluate_challenge(b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=") is None


def test_scram_refuses_a_server_nonce_that_does_not_extend_its_own_and_too_few_iterations() -> None:
    m = SCRAM_MECHANISMS["SCRAM-SHA-256"]
    client = ScramSaslClient(m, "broker", "x", nonce=lambda: "abc")
    with pytest.raises(SaslClientError, match="invalid server first message"):
        client.evaluate_challenge(b"r=other,s=QSXCR+Q6sek8bf92,i=4096")
    with pytest.raises(SaslClientError, match="fewer than the minimum"):
        ScramSaslClient(m, "broker", "x", nonce=lambda: "abc").evaluate_challenge(b"r=abcdef,s=QSXCR+Q6sek8bf92,i=100")


def test_oauthbearer_sends_an_unsecured_token_the_unsecured_validator_accepts() -> None:
    client = sasl_client("OAUTHBEARER", {"unsecuredLoginStringClaim_sub": "broker"})
    assert run_exchange(client, OAuthBearerSaslServer({})) == "broker"


def test_oauthbearer_answers_a_refusal_with_the_abort_byte() -> None:
    expired = sasl_client("OAUTHBEARER", {"unsecuredLoginStringClaim_sub": "broker", "unsecuredLoginLifetimeSeconds": "-60"})
    server = OAuthBearerSaslServer({})
    challenge = server.evaluate_response(expired.initial_response())
    assert b"invalid_token" in challenge
    assert expired.evaluate_challenge(challenge) == b"\x01"
    with pytest.raises(SaslAuthenticationError):
        server.evaluate_response(b"\x01")


def test_unsecured_jwt_has_no_signature() -> None:
    header, payload, signature = unsecured_jwt("broker", 60, 1_000_000.0).split(".")
    assert (header, signature) == ("eyJhbGciOiJub25lIn0", "")
    assert payload


@pytest.mark.parametrize(
    ("mechanism", "options", "message"),
    [
        ("PLAIN", {"user_broker": "x"}, "PLAIN between nodes needs username and password"),
        ("SCRAM-SHA-512", {"username": "broker"}, "needs username and password"),
        ("OAUTHBEARER", {}, "needs unsecuredLoginStringClaim_sub"),
        ("GSSAPI", {"username": "a", "password": "b"}, "GSSAPI is not served"),
    ],
)
def test_missing_credentials_are_named(mechanism: str, options: dict[str, str], message: str) -> None:
    with pytest.raises(SaslClientError, match=message):
        sasl_client(mechanism, options)

"""The SASL pieces without a socket: JAAS parsing, PLAIN's checks and messages, the per-connection
exchange (states, refusals, delays), and the listener settings a broker refuses to start with."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2 import request as authenticate_v2
from kio.schema.sasl_handshake.v0 import request as handshake_v0
from kio.schema.sasl_handshake.v1 import request as handshake_v1
from kio.schema.metadata.v12 import request as metadata_v12

from broker.config import BrokerConfig
from broker.wire_client import encode_request
from broker.security.jaas_config import JaasConfigError, parse_jaas_config
from broker.security.plain_sasl_server import PlainSaslServer
from broker.security.sasl_config import server_factories
from broker.security.sasl_server import SaslAuthenticationError
from broker.security.sasl_server_authenticator import SaslServerAuthenticator, SaslState
from protocol.api_keys import response_schema
from protocol.headers import parse_request_header

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice\\"s secret";'


def test_jaas_config_as_kafka_brokers_write_it() -> None:
    [module] = parse_jaas_config(JAAS)
    assert (module.name, module.flag) == ("org.apache.kafka.common.security.plain.PlainLoginModule", "required")
    assert module.options == {"username": "admin", "password": "admin-secret", "user_admin": "admin-secret", "user_alice": 'alice"s secret'}
    assert [m.name for m in parse_jaas_config("a.B required; c.D optional x=y;")] == ["a.B", "c.D"]


@pytest.mark.parametrize("text", ["", "a.B", "a.B mandatory;", 'a.B required user="x"', 'a.B required user=;', 'a.B required "x"="y";'])
def test_jaas_configs_that_do_not_parse(text: str) -> None:
    with pytest.raises(JaasConfigError):
        parse_jaas_config(text)


@given(st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), st.text(st.characters(blacklist_categories=("Cs",)), max_size=20), max_size=5))
def test_any_quoted_option_value_survives_the_round_trip(options: dict[str, str]) -> None:
    quoted = " ".join(f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"' for k, v in options.items())
    [module] = parse_jaas_config(f"x.Y required {quoted};")
    assert module.options == options


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (b"\x00alice\x00wrong", "Authentication failed: Invalid username or password"),
        (b"\x00bob\x00admin-secret", "Authentication failed: Invalid username or password"),
        (b"\x00\x00pw", "Authentication failed: username not specified"),
        (b"\x00alice\x00", "Authentication failed: password not specified"),
        (b"alice\x00", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
        (b"admin\x00alice\x00secret", "Authentication failed: Client requested an authorization id that is different from username"),
    ],
)
def test_plain_refuses_with_kafkas_messages(token: bytes, message: str) -> None:
    server = PlainSaslServer({"alice": "secret", "admin": "admin-secret"})
    with pytest.raises(SaslAuthenticationError, match=message):
        server.evaluate_response(token)
    assert not server.is_complete


def test_plain_accepts_with_or_without_an_authorization_id() -> None:
    for token in (b"\x00alice\x00secret", b"alice\x00alice\x00secret"):
        server = PlainSaslServer({"alice": "secret"})
        assert server.evaluate_response(token) == b""
        assert (server.is_complete, server.authorization_id) == (True, "alice")


def authenticator() -> SaslServerAuthenticator:
    return SaslServerAuthenticator({"PLAIN": lambda: PlainSaslServer({"alice": "secret"})}, 524288, 100)


def send(auth: SaslServerAuthenticator, body: object, correlation_id: int = 1):  # type: ignore[no-untyped-def]
    frame = bytearray(encode_request(body, correlation_id)[4:])
    return auth.request(parse_request_header(frame), frame)


def decode(frame: bytes, body: object):  # type: ignore[no-untyped-def]
    from kio.serial import entity_reader

    schema = response_schema(int(body.__api_key__), int(body.__version__))  # type: ignore[attr-defined]
    header_size = 4 + 4 + (1 if int(body.__api_key__) == 36 and int(body.__version__) >= 2 else 0)  # type: ignore[attr-defined]
    return entity_reader(schema)(memoryview(frame).toreadonly(), header_size)[0]


def test_the_exchange_from_handshake_to_authenticated() -> None:
    auth = authenticator()
    handshake = handshake_v1.SaslHandshakeRequest(mechanism="PLAIN")
    answer = send(auth, handshake)
    assert not answer.close and decode(answer.frame, handshake).mechanisms == ("PLAIN",)
    assert auth.state is SaslState.AUTHENTICATE
    request = authenticate_v2.SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00secret")
    answer = send(auth, request, 2)
    assert decode(answer.frame, request).error_code == ErrorCode.none
    assert (auth.complete, auth.principal) == (True, "User:alice")


def test_a_refused_password_is_answered_after_the_delay_and_closes() -> None:
    auth = authenticator()
    send(auth, handshake_v1.SaslHandshakeRequest(mechanism="PLAIN"))
    request = authenticate_v2.SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00guess")
    answer = send(auth, request, 2)
    assert (answer.close, answer.delay_s) == (True, 0.1)
    assert decode(answer.frame, request).error_code == ErrorCode.sasl_authentication_failed
    assert auth.state is SaslState.FAILED and auth.principal is None


def test_an_unknown_mechanism_and_a_request_out_of_turn_close_the_connection() -> None:
    auth = authenticator()
    answer = send(auth, handshake_v1.SaslHandshakeRequest(mechanism="GSSAPI"))
    assert answer.close and decode(answer.frame, handshake_v1.SaslHandshakeRequest(mechanism="x")).error_code == ErrorCode.unsupported_sasl_mechanism
    auth = authenticator()
    answer = send(auth, metadata_v12.MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    assert (answer.frame, answer.close) == (None, True)
    assert "Unexpected Kafka request of type METADATA" in (answer.reason or "")
    auth = authenticator()
    answer = send(auth, authenticate_v2.SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00secret"))
    assert answer.close and not auth.complete  # authenticate before the handshake


def test_handshake_v0_takes_the_token_bare() -> None:
    auth = authenticator()
    send(auth, handshake_v0.SaslHandshakeRequest(mechanism="PLAIN"))
    assert auth.expects_raw_token
    assert auth.raw_token(bytearray(b"\x00alice\x00secret")).frame == struct.pack(">i", 0)
    assert auth.complete
    refused = authenticator()
    send(refused, handshake_v0.SaslHandshakeRequest(mechanism="PLAIN"))
    answer = refused.raw_token(bytearray(b"\x00alice\x00nope"))
    assert (answer.frame, answer.close, answer.delay_s) == (None, True, 0.1)


def test_listener_prefixed_settings_reach_their_listener_only() -> None:
    cfg = BrokerConfig.model_validate(
        {
            "listeners": "PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9093",
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        }
    )
    assert cfg.listener_config("SASL_PLAINTEXT", "sasl.enabled.mechanisms") == "PLAIN"
    assert cfg.listener_config("PLAINTEXT", "sasl.enabled.mechanisms") == "GSSAPI"
    server = server_factories(cfg, "SASL_PLAINTEXT")["PLAIN"]()
    server.evaluate_response(b"\x00alice\x00alice\"s secret")
    assert server.is_complete
    # Described as Kafka describes them: under their full names, the JAAS config as a secret.
    assert "listener.name.sasl_plaintext.plain.sasl.jaas.config" in cfg.as_properties()

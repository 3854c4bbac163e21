"""The SASL pieces without a socket: JAAS parsing, PLAIN's checks and messages, SCRAM against
RFC 7677's exchange and its refusals, the controller's rules for SCRAM credentials and client
quotas, the per-connection exchange (states, refusals, delays), and listener-prefixed settings."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.sasl_authenticate.v2 import request as authenticate_v2
from kio.schema.sasl_handshake.v0 import request as handshake_v0
from kio.schema.sasl_handshake.v1 import request as handshake_v1

from broker.config import BrokerConfig
from broker.controller.client_quota_control_manager import QuotaAlteration, alter_client_quotas
from broker.controller.scram_control_manager import ScramDeletion, ScramUpsertion, alter_credentials
from broker.java_hash_map import java_hash_map_order
from broker.metadata.image_writer import image_records
from broker.metadata.metadata_delta import apply_records
from broker.metadata.metadata_image import EMPTY_IMAGE
from broker.metadata.metadata_records import ClientQuotaRecord, EntityData, RemoveUserScramCredentialRecord, UserScramCredentialRecord, decode_metadata_record
from broker.security.jaas_config import JaasConfigError, parse_jaas_config
from broker.security.oauthbearer_sasl_server import OAuthBearerSaslServer
from broker.security.plain_sasl_server import PlainSaslServer
from broker.security.sasl_config import server_factories
from broker.security.sasl_server import SaslAuthenticationError, SaslCredentialsError
from broker.security.sasl_server_authenticator import SaslServerAuthenticator, SaslState
from broker.security.scram import SCRAM_MECHANISMS, ScramSaslServer, new_credential
from broker.security.scram_parser import ScramParseError, parse_add_scram
from broker.wire_client import encode_request
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


def test_scram_sha_256_against_rfc_7677s_exchange() -> None:
    mechanism = SCRAM_MECHANISMS["SCRAM-SHA-256"]
    credential = new_credential(mechanism, "pencil", 4096, salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="))
    server = ScramSaslServer(mechanism, lambda user, m: credential if (user, m) == ("user", 1) else None, server_nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.evaluate_response(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = server.evaluate_response(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert (server.is_complete, server.authorization_id) == (True, "user")


def test_scram_takes_librdkafkas_doubled_nonce_as_kafka_does() -> None:
    """librdkafka before 2.6.1 (kcat's 2.0.2) writes r=<client nonce><combined nonce> in its final
    message, and signs exactly that; Kafka 3.8.1 and later take it (the nonce must end with theirs)."""
    mechanism = SCRAM_MECHANISMS["SCRAM-SHA-512"]
    credential = new_credential(mechanism, "pencil")
    server = ScramSaslServer(mechanism, lambda user, m: credential if user == "user" else None, server_nonce=lambda: "SERVER")
    server_first = server.evaluate_response(b"n,,n=user,r=abc")
    salted = hashlib.pbkdf2_hmac("sha512", b"pencil", credential.salt, credential.iterations)
    without_proof = b"c=biws,r=abcabcSERVER"
    auth_message = b"n=user,r=abc," + server_first + b"," + without_proof
    client_key = hmac.new(salted, b"Client Key", "sha512").digest()
    signature = hmac.new(hashlib.sha512(client_key).digest(), auth_message, "sha512").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    assert server.evaluate_response(without_proof + b",p=" + base64.b64encode(proof)).startswith(b"v=")
    assert server.is_complete


@pytest.mark.parametrize(
    ("first", "final"),
    [
        (b"n,,n=user,r=abc", b"c=biws,r=abcSERVER,p=" + base64.b64encode(bytes(32))),  # a wrong proof
        (b"n,,n=user,r=abc", b"c=biws,r=other,p=" + base64.b64encode(bytes(32))),  # another nonce
        (b"n,,n=nobody,r=abc", None),  # no such user
        (b"garbage", None),
    ],
)
def test_scram_refusals_never_tell_the_client_why(first: bytes, final: bytes | None) -> None:
    mechanism = SCRAM_MECHANISMS["SCRAM-SHA-256"]
    credential = new_credential(mechanism, "pencil")
    server = ScramSaslServer(mechanism, lambda user, m: credential if user == "user" else None, server_nonce=lambda: "SERVER")
    with pytest.raises(SaslCredentialsError):
        server.evaluate_response(first)
        assert final is not None
        server.evaluate_response(final)
    assert not server.is_complete


def test_scram_alterations_follow_kafkas_rules() -> None:
    existing = [UserScramCredentialRecord(name=n, mechanism=2, salt=b"s", stored_key=b"k", server_key=b"v", iterations=4096) for n in ("carol", "dave")]
    records, results = alter_credentials(
        apply_records(EMPTY_IMAGE, existing),
        [ScramDeletion("carol", 2), ScramDeletion("carol", 2), ScramDeletion("ghost", 1), ScramDeletion("dave", 2)],
        [ScramUpsertion("alice", 2, 4096, b"salt", b"salted"), ScramUpsertion("", 1, 4096, b"", b""), ScramUpsertion("x", 9, 4096, b"", b""), ScramUpsertion("few", 1, 100, b"", b""), ScramUpsertion("dave", 1, 4096, b"", b"")],
    )
    by_user = {user: (code, message) for user, code, message in results}
    assert by_user["alice"] == (0, None)
    assert by_user["ghost"] == (ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist")
    # carol deleted twice, dave deleted and upserted: the same user altered twice.
    assert by_user["carol"] == by_user["dave"] == (ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request")
    assert by_user[""] == (ErrorCode.unacceptable_credential, "Username must not be empty")
    assert by_user["x"] == (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
    assert by_user["few"] == (ErrorCode.unacceptable_credential, "Too few iterations")
    [record] = records
    assert isinstance(record, UserScramCredentialRecord) and record.name == "alice" and b"salted" not in (record.stored_key, record.server_key)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SCRAM-SHA-256", "Failed to find equals sign in SCRAM argument 'SCRAM-SHA-256'"),
        ("SCRAM-SHA-1=[name=a,password=b]", "The add-scram mechanism SCRAM-SHA-1 is not supported."),
        ("SCRAM-SHA-256=name=a]", "Expected configuration string to start with ["),
        ("SCRAM-SHA-256=[name=a", "Expected configuration string to end with ]"),
        ("SCRAM-SHA-256=[password=b]", "You must supply 'name' to add-scram"),
        ("SCRAM-SHA-256=[name=a]", "You must supply one of 'password' or 'saltedpassword' to add-scram"),
        ("SCRAM-SHA-256=[name=a,saltedpassword=YWJj]", "You must supply 'salt' with 'saltedpassword' to add-scram"),
        ("SCRAM-SHA-256=[name=a,password=b,colour=red]", "Unknown SCRAM configurations: colour"),
        ("SCRAM-SHA-256=[name=a,password=b,iterations=99999]", "The 'iterations' value must be <= 16384 for add-scram using SCRAM-SHA-256"),
        ("SCRAM-SHA-256=[name=a,password=b,iterations=many]", "Failed to parse iterations count: many"),
    ],
)
def test_add_scram_arguments_refused_with_kafkas_messages(text: str, message: str) -> None:
    with pytest.raises(ScramParseError) as e:
        parse_add_scram(text)
    assert str(e.value) == message


def test_add_scram_with_a_salted_password_stores_what_alter_would() -> None:
    salt, salted = b"0123456789abcdef", bytes(range(32))
    record = parse_add_scram(f'SCRAM-SHA-512=[name="bob",iterations=8192,salt="{base64.b64encode(salt).decode()}",saltedpassword="{base64.b64encode(salted).decode()}"]')
    [expected], _ = alter_credentials(EMPTY_IMAGE, [], [ScramUpsertion("bob", 2, 8192, salt, salted)])
    assert record == expected


def test_scram_credentials_live_in_the_metadata_image_and_its_snapshots() -> None:
    record = UserScramCredentialRecord(name="alice", mechanism=2, salt=b"\x00salt", stored_key=b"k" * 64, server_key=b"v" * 64, iterations=8192)
    assert decode_metadata_record(record.encode()) == record
    image = apply_records(EMPTY_IMAGE, [record])
    assert apply_records(EMPTY_IMAGE, image_records(image)).scram_credentials == image.scram_credentials
    assert not apply_records(image, [RemoveUserScramCredentialRecord(name="alice", mechanism=2)]).scram_credentials


def test_client_quota_alterations_follow_kafkas_rules() -> None:
    image = apply_records(EMPTY_IMAGE, [ClientQuotaRecord(entity=(EntityData(entity_type="user", entity_name="a"),), key="producer_byte_rate", value=1024.0)])
    records, results = alter_client_quotas(
        image,
        [
            QuotaAlteration((("user", "a"),), (("producer_byte_rate", 1024.0), ("consumer_byte_rate", 2048.0))),
            QuotaAlteration((("user", "b"),), (("producer_byte_rate", None),)),
            QuotaAlteration((), (("producer_byte_rate", 1.0),)),
            QuotaAlteration((("user", "c"), ("user", "d")), ()),
            QuotaAlteration((("group", "g"),), ()),
            QuotaAlteration((("client-id", ""),), ()),
            QuotaAlteration((("ip", "127.0.0.1"), ("user", "e")), ()),
            QuotaAlteration((("user", "f"),), (("connection_creation_rate", 5.0),)),
            QuotaAlteration((("user", "g"),), (("producer_byte_rate", 0.0),)),
            QuotaAlteration((("user", "h"),), (("producer_byte_rate", 1.5),)),
            QuotaAlteration((("user", "i"),), (("request_percentage", 1.0), ("request_percentage", 2.0))),
            QuotaAlteration((("ip", None),), (("connection_creation_rate", 10.0),)),
        ],
    )
    errors = {entity: message for entity, code, message in results if code}
    assert errors == {
        (): "Invalid empty client quota entity",
        (("user", "c"), ("user", "d")): "Invalid client quota entity, duplicate entity entry user",
        (("group", "g"),): "Unhandled client quota entity type: group",
        (("client-id", ""),): "Empty client-id not supported",
        (("ip", "127.0.0.1"), ("user", "e")): "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId",
        (("user", "f"),): "Invalid configuration key connection_creation_rate",
        (("user", "g"),): "Quota producer_byte_rate must be greater than 0",
        (("user", "h"),): "producer_byte_rate cannot be a fractional value.",
        (("user", "i"),): "Duplicate quota key request_percentage not updating quota for this entity ClientQuotaEntity(entries={user=i})",
    }
    # Unchanged values and removals of what is not set write nothing.
    assert [(r.entity, r.key, r.value) for r in records] == [
        ((EntityData(entity_type="user", entity_name="a"),), "consumer_byte_rate", 2048.0),
        ((EntityData(entity_type="ip", entity_name=None),), "connection_creation_rate", 10.0),
    ]
    assert java_hash_map_order(["producer_byte_rate", "request_percentage"]) == ["request_percentage", "producer_byte_rate"]


def unsecured_jwt(claims: dict[str, object], header: dict[str, object] | None = None) -> str:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part(header or {'alg': 'none'})}.{part(claims)}."


def oauth_message(token: str, authzid: str = "") -> bytes:
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01\x01".encode()


def test_oauthbearer_accepts_an_unsecured_token_naming_its_principal() -> None:
    server = OAuthBearerSaslServer({}, now_ms=lambda: 1_000_000)
    assert server.evaluate_response(oauth_message(unsecured_jwt({"sub": "alice", "exp": 2000, "iat": 900}))) == b""
    assert (server.is_complete, server.authorization_id) == (True, "alice")


@pytest.mark.parametrize(
    ("claims", "options", "challenge"),
    [
        ({"sub": "alice", "exp": 999}, {}, b'{"status":"invalid_token"}'),  # expired
        ({"sub": "alice"}, {}, b'{"status":"invalid_token"}'),  # no exp
        ({"exp": 2000}, {}, b'{"status":"invalid_token"}'),  # no principal
        ({"sub": "alice", "exp": 2000, "iat": 1200}, {}, b'{"status":"invalid_token"}'),  # issued in the future
        ({"sub": "alice", "exp": 2000, "scope": ["a"]}, {"unsecuredValidatorRequiredScope": "a b"}, b'{"status":"insufficient_scope", "scope":"[a, b]"}'),
    ],
)
def test_oauthbearer_refuses_with_kafkas_json_challenge_then_fails(claims: dict[str, object], options: dict[str, str], challenge: bytes) -> None:
    server = OAuthBearerSaslServer(options, now_ms=lambda: 1_000_000)
    assert server.evaluate_response(oauth_message(unsecured_jwt(claims))) == challenge
    with pytest.raises(SaslAuthenticationError, match=re.escape(challenge.decode())):
        server.evaluate_response(b"\x01")
    assert not server.is_complete


def test_oauthbearer_refuses_a_signed_token_an_authzid_of_someone_else_and_garbage() -> None:
    server = OAuthBearerSaslServer({}, now_ms=lambda: 1_000_000)
    assert server.evaluate_response(oauth_message(unsecured_jwt({"sub": "a", "exp": 2000}, {"alg": "RS256"}))) == b'{"status":"invalid_token"}'
    with pytest.raises(SaslAuthenticationError, match=r"authorization id \(bob\) that is different from the token's principal name \(alice\)"):
        OAuthBearerSaslServer({}, now_ms=lambda: 1_000_000).evaluate_response(oauth_message(unsecured_jwt({"sub": "alice", "exp": 2000}), authzid="bob"))
    with pytest.raises(SaslCredentialsError):
        OAuthBearerSaslServer({}).evaluate_response(b"n,,\x01auth=Basic xyz\x01\x01")


def reauthenticating(clock: list[float], reauth_ms: int = 10_000) -> SaslServerAuthenticator:
    users = {"alice": "secret", "bob": "other"}
    return SaslServerAuthenticator({"PLAIN": lambda: PlainSaslServer(users)}, 524288, 100, reauth_ms, now=lambda: clock[0])


def reauth_handshake(auth: SaslServerAuthenticator, mechanism: str = "PLAIN"):  # type: ignore[no-untyped-def]
    frame = bytearray(encode_request(handshake_v1.SaslHandshakeRequest(mechanism=mechanism), 3)[4:])
    return auth.begin_reauthentication(parse_request_header(frame), frame)


def test_kip_368_a_session_lasts_connections_max_reauth_ms_and_renews_with_the_same_principal() -> None:
    clock = [100.0]
    auth = reauthenticating(clock)
    send(auth, handshake_v1.SaslHandshakeRequest(mechanism="PLAIN"))
    request = authenticate_v2.SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00secret")
    answer = decode(send(auth, request, 2).frame, request)
    assert answer.session_lifetime.total_seconds() == 10.0
    clock[0] = 109.0
    assert not auth.session_expired()
    assert not reauth_handshake(auth).close
    answer = decode(send(auth, request, 4).frame, request)
    assert answer.error_code == ErrorCode.none and auth.complete and auth.principal == "User:alice"
    clock[0] = 118.0
    assert not auth.session_expired()  # the new session runs from the re-authentication
    clock[0] = 119.0
    assert auth.session_expired()


def test_kip_368_refusals_another_principal_another_mechanism_and_no_reauth_configured() -> None:
    clock = [0.0]
    auth = reauthenticating(clock)
    send(auth, handshake_v1.SaslHandshakeRequest(mechanism="PLAIN"))
    send(auth, authenticate_v2.SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00secret"), 2)
    reauth_handshake(auth)
    request = authenticate_v2.SaslAuthenticateRequest(auth_bytes=b"\x00bob\x00other")
    answer = send(auth, request, 4)
    assert answer.close and decode(answer.frame, request).error_code == ErrorCode.sasl_authentication_failed
    assert "Cannot change principals during re-authentication from User:alice" in (answer.reason or "")

    auth = reauthenticating(clock)
    send(auth, handshake_v1.SaslHandshakeRequest(mechanism="PLAIN"))
    send(auth, authenticate_v2.SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00secret"), 2)
    answer = reauth_handshake(auth, "SCRAM-SHA-512")
    assert answer is not None and answer.close

    plain = authenticator()  # connections.max.reauth.ms=0: no session expires, no re-authentication
    send(plain, handshake_v1.SaslHandshakeRequest(mechanism="PLAIN"))
    send(plain, authenticate_v2.SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00secret"), 2)
    assert reauth_handshake(plain) is None and not plain.session_expired()


def test_kip_368_an_oauth_session_ends_no_later_than_its_token() -> None:
    clock = [0.0]
    now_ms = 1_000_000_000_000
    factory = lambda: OAuthBearerSaslServer({}, now_ms=lambda: now_ms)  # noqa: E731
    auth = SaslServerAuthenticator({"OAUTHBEARER": factory}, 524288, 100, 60_000, now=lambda: clock[0], wall_ms=lambda: now_ms)
    send(auth, handshake_v1.SaslHandshakeRequest(mechanism="OAUTHBEARER"))
    token = unsecured_jwt({"sub": "alice", "exp": now_ms // 1000 + 5})
    request = authenticate_v2.SaslAuthenticateRequest(auth_bytes=oauth_message(token))
    answer = decode(send(auth, request, 2).frame, request)
    assert answer.error_code == ErrorCode.none and answer.session_lifetime.total_seconds() == 5.0

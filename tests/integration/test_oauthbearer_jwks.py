"""Signed OAuth tokens (KIP-768): a SASL_PLAINTEXT listener whose OAUTHBEARER tokens are checked
against a JWKS endpoint (a file: URL here, as Kafka also takes), with an expected audience and
issuer. confluent-kafka logs in with a token signed by the endpoint's key; a token signed by
another key, for another audience, from another issuer, expired, or unsigned is refused, each
costing only its own connection."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest
from confluent_kafka import KafkaError, Producer
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.integration.conftest import BrokerProcess, retire
from tests.integration.helpers import create_topic, unique_topic
from tests.ports import free_ports

ISSUER = "https://issuer.kbroker.test"
AUDIENCE = "kbroker"
TIMEOUT_S = 30.0


class Issuer:
    def __init__(self, directory: Path) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.jwks = directory / "jwks.json"
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        self.jwks.write_text(json.dumps({"keys": [{**public, "kid": "key-1", "use": "sig", "alg": "RS256"}]}))

    def token(self, key: rsa.RSAPrivateKey | None = None, kid: str = "key-1", **claims: object) -> str:
        now = int(time.time())
        body = {"sub": "alice", "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 300, **claims}
        return jwt.encode(body, key or self.key, algorithm="RS256", headers={"kid": kid})


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str, Issuer]]:
    directory = tmp_path_factory.mktemp("jwks")
    issuer = Issuer(directory)
    broker = BrokerProcess(directory / "data")
    (sasl_port,) = free_ports(1)
    broker.overrides.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
            "sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ;",
            "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
            "sasl.oauthbearer.jwks.endpoint.url": issuer.jwks.as_uri(),
            "sasl.oauthbearer.expected.audience": AUDIENCE,
            "sasl.oauthbearer.expected.issuer": ISSUER,
            "connection.failed.authentication.delay.ms": "0",
        }
    )
    broker.start()
    try:
        yield broker, f"127.0.0.1:{sasl_port}", issuer
    finally:
        retire(broker)


def client(address: str, token: str, errors: list[KafkaError]) -> Producer:
    expiry = time.time() + 300
    return Producer(
        {
            "bootstrap.servers": address,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER",
            "oauth_cb": lambda config: (token, expiry),
            "message.timeout.ms": 10000,
            "error_cb": errors.append,
        }
    )


def produce_with(address: str, token: str, topic: str) -> list[KafkaError | None]:
    reports: list[KafkaError | None] = []
    producer = client(address, token, [])
    producer.produce(topic, b"v", on_delivery=lambda err, msg: reports.append(err))
    producer.flush(TIMEOUT_S)
    return reports


def refused(address: str, token: str) -> bool:
    """Whether the broker refuses to authenticate the client, as librdkafka reports it."""
    errors: list[KafkaError] = []
    producer = client(address, token, errors)
    deadline = time.monotonic() + TIMEOUT_S
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors):
        if time.monotonic() > deadline:
            return False
        producer.poll(0.1)
    return True


def test_a_token_signed_by_the_endpoints_key_logs_in(broker: tuple[BrokerProcess, str, Issuer]) -> None:
    node, address, issuer = broker
    topic = unique_topic("jwks")
    create_topic(node.bootstrap, topic)
    assert produce_with(address, issuer.token(), topic) == [None]


@pytest.mark.parametrize(
    "case",
    ["another key", "unknown key id", "another audience", "another issuer", "expired", "unsigned", "no subject"],
)
def test_a_token_kafka_would_refuse_is_refused(broker: tuple[BrokerProcess, str, Issuer], case: str) -> None:
    node, address, issuer = broker
    now = int(time.time())
    tokens = {
        "another key": lambda: issuer.token(rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        "unknown key id": lambda: issuer.token(kid="key-2"),
        "another audience": lambda: issuer.token(aud="someone-else"),
        "another issuer": lambda: issuer.token(iss="https://elsewhere.test"),
        "expired": lambda: issuer.token(iat=now - 600, exp=now - 120),
        "unsigned": lambda: jwt.encode({"sub": "alice", "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 300}, None, algorithm="none"),
        "no subject": lambda: issuer.token(sub=""),
    }
    assert refused(address, tokens[case]()), f"{case}: the token was not refused"


def test_refused_clients_cost_only_their_own_connections(broker: tuple[BrokerProcess, str, Issuer]) -> None:
    node, address, issuer = broker
    topic = unique_topic("jwks-others")
    create_topic(node.bootstrap, topic)
    assert refused(address, issuer.token(aud="someone-else"))
    assert produce_with(address, issuer.token(), topic) == [None]

"""SaslClient: a node's side of a SASL exchange with another node, sans-IO.

Kafka's SaslClientAuthenticator picks a client for the mechanism of the link
(`sasl.mechanism.inter.broker.protocol`, `sasl.mechanism.controller.protocol`) and feeds it the
server's challenges. The credentials are the login module options of the listener's
`sasl.jaas.config`, as a Kafka broker takes them: PLAIN's and SCRAM's `username` and `password`,
OAUTHBEARER's `unsecuredLoginStringClaim_sub` (an unsigned token, OAuthBearerUnsecuredLoginCallbackHandler's).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Callable, Protocol

from broker.security.scram import SCRAM_MECHANISMS, ScramMechanism, random_nonce, salted_password


class SaslClientError(Exception):
    """The server's answer cannot be right, or this node has no credentials for the mechanism."""


class SaslClient(Protocol):
    mechanism: str

    def initial_response(self) -> bytes: ...

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        """The next message to send, or None when the exchange is complete."""
        ...


class PlainSaslClient:
    def __init__(self, username: str, password: str) -> None:
        self.mechanism = "PLAIN"
        self._message = b"\x00" + username.encode() + b"\x00" + password.encode()

    def initial_response(self) -> bytes:
        return self._message

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        return None


def _escape(name: str) -> str:
    """RFC 5802's saslname."""
    return name.replace("=", "=3D").replace(",", "=2C")


class ScramSaslClient:
    """RFC 5802 without channel binding: client-first, client-final, then the server's signature is checked."""

    def __init__(self, mechanism: ScramMechanism, username: str, password: str, nonce: Callable[[], str] = random_nonce) -> None:
        self.mechanism = mechanism.name
        self._m = mechanism
        self._password = password
        self._client_first_bare = f"n={_escape(username)},r={nonce()}"
        self._server_signature: bytes | None = None

    def initial_response(self) -> bytes:
        return ("n,," + self._client_first_bare).encode()

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        if self._server_signature is None:
            return self._client_final(challenge.decode("utf-8", errors="replace"))
        self._check_server_final(challenge.decode("utf-8", errors="replace"))
        return None

    def _client_final(self, server_first: str) -> bytes:
        fields = dict(part.split("=", 1) for part in server_first.split(",") if "=" in part)
        nonce, salt, iterations = fields.get("r", ""), fields.get("s"), fields.get("i", "")
        client_nonce = self._client_first_bare.split(",r=", 1)[1]
        if not nonce.startswith(client_nonce) or salt is None or not iterations.isdigit():
            raise SaslClientError(f"{self.mechanism}: invalid server first message")
        if int(iterations) < self._m.min_iterations:
            raise SaslClientError(f"{self.mechanism}: {iterations} iterations are fewer than the minimum {self._m.min_iterations}")
        salted = salted_password(self._m, self._password, base64.b64decode(salt), int(iterations))
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._client_first_bare},{server_first},{without_proof}".encode()
        client_key = hmac.new(salted, b"Client Key", self._m.hash_name).digest()
        signature = hmac.new(hashlib.new(self._m.hash_name, client_key).digest(), auth_message, self._m.hash_name).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        server_key = hmac.new(salted, b"Server Key", self._m.hash_name).digest()
        self._server_signature = hmac.new(server_key, auth_message, self._m.hash_name).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _check_server_final(self, server_final: str) -> None:
        assert self._server_signature is not None
        if server_final.startswith("e="):
            raise SaslClientError(f"{self.mechanism}: the server refused the exchange: {server_final[2:]}")
        got = base64.b64decode(server_final.removeprefix("v=")) if server_final.startswith("v=") else b""
        if not hmac.compare_digest(got, self._server_signature):
            raise SaslClientError(f"{self.mechanism}: the server's signature is wrong")


def unsecured_jwt(subject: str, lifetime_s: int, now: float) -> str:
    """An unsigned token (alg none), as OAuthBearerUnsecuredLoginCallbackHandler makes."""

    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value, separators=(",", ":")).encode()).rstrip(b"=").decode()

    issued = int(now)
    return f"{part({'alg': 'none'})}.{part({'iat': issued, 'exp': issued + lifetime_s, 'sub': subject})}."


class OAuthBearerSaslClient:
    """RFC 7628's client response. A server's error challenge is answered with the one-byte abort,
    so that the server ends the exchange with its reason as the failure's message."""

    def __init__(self, token: str) -> None:
        self.mechanism = "OAUTHBEARER"
        self._token = token
        self._aborted = False

    def initial_response(self) -> bytes:
        return f"n,,\x01auth=Bearer {self._token}\x01\x01".encode()

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        if self._aborted:
            raise SaslClientError("OAUTHBEARER: the server went on after refusing the token")
        if challenge:
            self._aborted = True
            return b"\x01"
        return None


def sasl_client(mechanism: str, options: dict[str, str], now: Callable[[], float] = time.time) -> SaslClient:
    """A new client for one exchange, from the listener's login module options."""
    if mechanism == "OAUTHBEARER":
        subject = options.get("unsecuredLoginStringClaim_sub")
        if subject is None:
            raise SaslClientError("OAUTHBEARER between nodes needs unsecuredLoginStringClaim_sub in the listener's sasl.jaas.config")
        lifetime_s = int(options.get("unsecuredLoginLifetimeSeconds", "3600"))
        return OAuthBearerSaslClient(unsecured_jwt(subject, lifetime_s, now()))
    username, password = options.get("username"), options.get("password")
    if username is None or password is None:
        raise SaslClientError(f"{mechanism} between nodes needs username and password in the listener's sasl.jaas.config")
    if mechanism == "PLAIN":
        return PlainSaslClient(username, password)
    if mechanism in SCRAM_MECHANISMS:
        return ScramSaslClient(SCRAM_MECHANISMS[mechanism], username, password)
    raise SaslClientError(f"SASL mechanism {mechanism} is not served by kbroker")

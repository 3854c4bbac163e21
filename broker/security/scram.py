"""SCRAM (RFC 5802) as Kafka speaks it: the key derivation of Kafka's ScramFormatter and the
server side of the exchange (ScramSaslServer), against credentials from the metadata log.

Mechanism ids are Kafka's (admin ScramMechanism): 1 SCRAM-SHA-256, 2 SCRAM-SHA-512; iterations
4096..16384. Only the salt, the stored key and the server key are kept, never the password.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from dataclasses import dataclass
from typing import Callable

from broker.metadata.metadata_image import ScramCredential
from broker.security.sasl_server import SaslAuthenticationError, SaslCredentialsError


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    name: str
    type_id: int
    hash_name: str
    min_iterations: int = 4096
    max_iterations: int = 16384


SCRAM_MECHANISMS = {m.name: m for m in (ScramMechanism("SCRAM-SHA-256", 1, "sha256"), ScramMechanism("SCRAM-SHA-512", 2, "sha512"))}
SCRAM_BY_TYPE = {m.type_id: m for m in SCRAM_MECHANISMS.values()}


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)


def _hmac(mechanism: ScramMechanism, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, mechanism.hash_name).digest()


def credential_from_salted_password(mechanism: ScramMechanism, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    """What the controller stores for AlterUserScramCredentials' (salt, salted password)."""
    client_key = _hmac(mechanism, salted, b"Client Key")
    stored_key = hashlib.new(mechanism.hash_name, client_key).digest()
    return ScramCredential(salt, stored_key, _hmac(mechanism, salted, b"Server Key"), iterations)


def new_credential(mechanism: ScramMechanism, password: str, iterations: int = 4096, salt: bytes | None = None) -> ScramCredential:
    salt = os.urandom(32) if salt is None else salt
    return credential_from_salted_password(mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations)


def _sasl_name(value: str) -> str:
    """RFC 5802's saslname: ',' and '=' arrive escaped as =2C and =3D."""
    if re.search(r"=(?!2C|3D)", value):
        raise SaslAuthenticationError("Invalid username")
    return value.replace("=2C", ",").replace("=3D", "=")


_CLIENT_FIRST = re.compile(r"(?P<gs2>[ny]|p=[^,]*),(?:a=(?P<authzid>[^,]*))?,(?P<bare>n=(?P<user>[^,]*),r=(?P<nonce>[^,]+)(?:,.*)?)$", re.S)
_CLIENT_FINAL = re.compile(r"(?P<without_proof>c=(?P<channel>[^,]*),r=(?P<nonce>[^,]+)(?:,[^p][^,]*)*),p=(?P<proof>[^,]+)$", re.S)


def random_nonce() -> str:
    return base64.b64encode(os.urandom(18)).decode()


class ScramSaslServer:
    def __init__(self, mechanism: ScramMechanism, lookup: Callable[[str, int], ScramCredential | None], server_nonce: Callable[[], str] = random_nonce) -> None:
        self.mechanism = mechanism.name
        self._m = mechanism
        self._lookup = lookup
        self._server_nonce = server_nonce
        self.is_complete = False
        self.authorization_id = ""
        self._credential: ScramCredential | None = None
        self._auth_message_start = b""
        self._nonce = ""

    def evaluate_response(self, response: bytes) -> bytes:
        if self._credential is None:
            return self._client_first(response)
        return self._client_final(response)

    def _client_first(self, response: bytes) -> bytes:
        m = _CLIENT_FIRST.match(response.decode("utf-8", errors="replace"))
        if m is None:
            raise SaslCredentialsError("Invalid SCRAM client first message")
        if m.group("gs2").startswith("p="):
            raise SaslCredentialsError("Channel binding is not supported")
        username = _sasl_name(m.group("user"))
        credential = self._lookup(username, self._m.type_id)
        if credential is None:
            raise SaslCredentialsError("Authentication failed: Invalid user credentials")
        authzid = m.group("authzid") or ""
        if authzid and _sasl_name(authzid) != username:
            raise SaslAuthenticationError("Authentication failed: Client requested an authorization id that is different from username")
        if credential.iterations < self._m.min_iterations:
            raise SaslCredentialsError(f"Iterations {credential.iterations} is less than the minimum {self._m.min_iterations} for {self._m.name}")
        self._credential = credential
        self.authorization_id = username
        self._nonce = m.group("nonce") + self._server_nonce()
        server_first = f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},i={credential.iterations}".encode()
        self._auth_message_start = m.group("bare").encode() + b"," + server_first
        return server_first

    def _client_final(self, response: bytes) -> bytes:
        credential = self._credential
        assert credential is not None
        m = _CLIENT_FINAL.match(response.decode("utf-8", errors="replace"))
        if m is None or self.is_complete:
            raise SaslCredentialsError("Invalid SCRAM client final message")
        # librdkafka before 2.6.1 sends its own nonce again in front of the combined one; Kafka
        # takes that since 3.8.1 (a suffix match), and so does kbroker: kcat and older clients.
        if not m.group("nonce").endswith(self._nonce):
            raise SaslCredentialsError("Invalid client nonce in the final client message.")
        auth_message = self._auth_message_start + b"," + m.group("without_proof").encode()
        try:
            proof = base64.b64decode(m.group("proof"), validate=True)
        except ValueError:
            raise SaslCredentialsError("Invalid client final message") from None
        signature = _hmac(self._m, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise SaslCredentialsError("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(self._m.hash_name, client_key).digest(), credential.stored_key):
            raise SaslCredentialsError("Invalid client credentials")
        self.is_complete = True
        return b"v=" + base64.b64encode(_hmac(self._m, credential.server_key, auth_message))

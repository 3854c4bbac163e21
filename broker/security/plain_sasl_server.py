"""PlainSaslServer: SASL/PLAIN (RFC 4616) against the users of the listener's JAAS config.

One message from the client, `[authzid] NUL authcid NUL passwd`, checked as Kafka's
PlainSaslServer and PlainServerCallbackHandler check it, with Kafka's messages.
"""

from __future__ import annotations

import hmac
from typing import Mapping

from broker.security.sasl_server import SaslAuthenticationError


class PlainSaslServer:
    mechanism = "PLAIN"

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.is_complete = False
        self.authorization_id = ""

    def evaluate_response(self, response: bytes) -> bytes:
        tokens = response.split(b"\x00")
        if len(tokens) != 3:
            raise SaslAuthenticationError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}")
        authzid, username, password = (t.decode("utf-8", errors="replace") for t in tokens)
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self._users.get(username)
        # Compared in constant time, so that the answer's timing tells nothing about the password.
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationError("Authentication failed: Client requested an authorization id that is different from username")
        self.authorization_id = username
        self.is_complete = True
        return b""

"""What a SASL mechanism's server side offers the authenticator (Kafka: javax.security.sasl.SaslServer)."""

from __future__ import annotations

from typing import Callable, Protocol


class SaslAuthenticationError(Exception):
    """The client's credentials or messages were refused; the message goes back to the client."""


class SaslCredentialsError(Exception):
    """Refused where saying why could tell the client whether a user exists (Kafka's SaslException):
    the client gets a message that names only the mechanism; the reason goes to the log."""


class SaslServer(Protocol):
    mechanism: str
    is_complete: bool
    authorization_id: str

    def evaluate_response(self, response: bytes) -> bytes:
        """The client's next message in, the server's challenge out (raises SaslAuthenticationError)."""
        ...


SaslServerFactory = Callable[[], SaslServer]

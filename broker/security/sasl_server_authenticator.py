"""SaslServerAuthenticator: one connection's SASL exchange, sans-IO (Kafka's SaslServerAuthenticator).

Until the exchange completes a SASL listener takes only ApiVersions (answered as anywhere else,
by the connection's dispatch), SaslHandshake and SaslAuthenticate; any other request closes the
connection, as in Kafka. A SaslHandshake v0 is followed by the mechanism's messages as bare
size-prefixed tokens (the pre-KIP-152 exchange); v1 by SaslAuthenticate requests. A refused
exchange is answered with Kafka's error, after ``connection.failed.authentication.delay.ms``,
and then the connection is closed.

KIP-368's re-authentication, when ``connections.max.reauth.ms`` is set: a successful
SaslAuthenticate tells the client its session's lifetime (shorter for an OAuth token that expires
sooner); a SaslHandshake on the authenticated connection begins a new exchange, which must use
the same mechanism and end with the same principal; a request after the session has expired
closes the connection (the connection asks ``session_expired``), as Kafka's processor does.
"""

from __future__ import annotations

import datetime
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from kio.schema.errors import ErrorCode

from broker.security.sasl_server import SaslAuthenticationError, SaslCredentialsError, SaslServer, SaslServerFactory
from protocol.api_keys import ApiKey, is_supported, response_schema
from protocol.entities import build
from protocol.headers import RequestHeader
from protocol.messages import decode_request, encode_response


class SaslState(Enum):
    HANDSHAKE = "handshake"  # waiting for SaslHandshake (ApiVersions allowed)
    AUTHENTICATE = "authenticate"  # SaslAuthenticate requests (handshake v1)
    RAW_TOKENS = "raw tokens"  # bare tokens (handshake v0)
    COMPLETE = "complete"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class AuthAnswer:
    """What the connection does with one request of the exchange: send ``frame`` (after
    ``delay_s``), and close once it is out when ``close``."""

    frame: bytes | None
    close: bool = False
    delay_s: float = 0.0
    reason: str | None = None  # why it closes, for the log (never a secret)


class SaslServerAuthenticator:
    """``now``: a monotonic clock in seconds (the session's expiry); ``wall_ms``: the wall clock
    an OAuth token's ``exp`` is read against."""

    def __init__(
        self,
        mechanisms: dict[str, SaslServerFactory],
        max_receive_size: int,
        failed_delay_ms: int,
        reauth_ms: int = 0,
        now: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._mechanisms = mechanisms
        self._max_receive_size = max_receive_size
        self._failed_delay_s = failed_delay_ms / 1000
        self._reauth_ms = reauth_ms
        self._now = now
        self._wall_ms = wall_ms
        self._server: SaslServer | None = None
        self.state = SaslState.HANDSHAKE
        self.principal: str | None = None
        self._session_expires: float | None = None  # monotonic seconds; None: never
        self._reauthenticating = False

    def session_expired(self) -> bool:
        return self._session_expires is not None and self._now() >= self._session_expires

    def begin_reauthentication(self, header: RequestHeader, frame: bytearray) -> AuthAnswer | None:
        """A SaslHandshake on the authenticated connection: the first step of a re-authentication
        when ``connections.max.reauth.ms`` allows one, else None (answered as any request)."""
        if not self._reauth_ms or self.state is not SaslState.COMPLETE or header.api_version < 1:
            return None
        assert self._server is not None
        mechanism = decode_request(header.api_key, header.api_version, frame, header.body_offset).mechanism
        if mechanism != self._server.mechanism:
            self.state = SaslState.FAILED
            reason = f"SaslHandshake request mechanism must be the same for re-authentication: {self._server.mechanism} != {mechanism}"
            return AuthAnswer(None, close=True, reason=reason)
        self._reauthenticating = True
        self.state = SaslState.HANDSHAKE
        return self._handshake(header, mechanism)

    @property
    def complete(self) -> bool:
        return self.state is SaslState.COMPLETE

    @property
    def expects_raw_token(self) -> bool:
        return self.state is SaslState.RAW_TOKENS

    def request(self, header: RequestHeader, frame: bytearray) -> AuthAnswer:
        """A SaslHandshake or SaslAuthenticate (anything else during the exchange closes the connection)."""
        key, version = header.api_key, header.api_version
        if self.state is SaslState.HANDSHAKE and key == ApiKey.SASL_HANDSHAKE and is_supported(key, version):
            return self._handshake(header, decode_request(key, version, frame, header.body_offset).mechanism)
        if self.state is SaslState.AUTHENTICATE and key == ApiKey.SASL_AUTHENTICATE and is_supported(key, version):
            return self._authenticate(header, bytes(decode_request(key, version, frame, header.body_offset).auth_bytes))
        reason = f"Unexpected Kafka request of type {_api_name(key)} (version {version}) during SASL {self.state.value}"
        self.state = SaslState.FAILED
        return AuthAnswer(None, close=True, reason=reason)

    def raw_token(self, frame: bytearray) -> AuthAnswer:
        """A bare token after a v0 handshake: its size prefix is already off, so ``frame`` is the token."""
        server = self._server
        assert server is not None
        try:
            challenge = server.evaluate_response(bytes(frame))
        except (SaslAuthenticationError, SaslCredentialsError) as e:
            self.state = SaslState.FAILED
            return AuthAnswer(None, close=True, delay_s=self._failed_delay_s, reason=str(e))
        self._maybe_complete(server)
        return AuthAnswer(struct.pack(">i", len(challenge)) + challenge)

    def _handshake(self, header: RequestHeader, mechanism: str) -> AuthAnswer:
        schema = response_schema(ApiKey.SASL_HANDSHAKE, header.api_version)
        enabled = tuple(self._mechanisms)
        factory = self._mechanisms.get(mechanism)
        if factory is None:
            self.state = SaslState.FAILED
            frame = encode_response(ApiKey.SASL_HANDSHAKE, header.api_version, header.correlation_id, build(schema, error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=enabled))
            return AuthAnswer(frame, close=True, delay_s=self._failed_delay_s, reason=f"Unsupported SASL mechanism {mechanism}")
        self._server = factory()
        self.state = SaslState.AUTHENTICATE if header.api_version >= 1 else SaslState.RAW_TOKENS
        return AuthAnswer(encode_response(ApiKey.SASL_HANDSHAKE, header.api_version, header.correlation_id, build(schema, error_code=ErrorCode.none, mechanisms=enabled)))

    def _authenticate(self, header: RequestHeader, token: bytes) -> AuthAnswer:
        server = self._server
        assert server is not None
        schema = response_schema(ApiKey.SASL_AUTHENTICATE, header.api_version)

        def answer(error: int, message: str, challenge: bytes, lifetime_ms: int = 0) -> bytes:
            body = build(schema, error_code=error, error_message=message, auth_bytes=challenge, session_lifetime=datetime.timedelta(milliseconds=lifetime_ms))
            return encode_response(ApiKey.SASL_AUTHENTICATE, header.api_version, header.correlation_id, body)

        try:
            challenge = server.evaluate_response(token)
        except SaslAuthenticationError as e:
            self.state = SaslState.FAILED
            return AuthAnswer(answer(ErrorCode.sasl_authentication_failed, str(e), b""), close=True, delay_s=self._failed_delay_s, reason=str(e))
        except SaslCredentialsError as e:
            self.state = SaslState.FAILED
            message = f"Authentication failed during authentication due to invalid credentials with SASL mechanism {server.mechanism}"
            return AuthAnswer(answer(ErrorCode.sasl_authentication_failed, message, b""), close=True, delay_s=self._failed_delay_s, reason=str(e))
        previous, reauthenticating = self.principal, self._reauthenticating
        self._maybe_complete(server)
        if self.complete and reauthenticating and self.principal != previous:
            self.state = SaslState.FAILED
            message = f"Cannot change principals during re-authentication from {previous}: {self.principal}"
            return AuthAnswer(answer(ErrorCode.sasl_authentication_failed, message, b""), close=True, reason=message)
        lifetime_ms = self._session_lifetime_ms(server) if self.complete and header.api_version >= 1 else 0
        return AuthAnswer(answer(ErrorCode.none, "", challenge, lifetime_ms))  # Kafka's success carries an empty message, not null

    def _maybe_complete(self, server: SaslServer) -> None:
        if server.is_complete:
            self.state = SaslState.COMPLETE
            self.principal = f"User:{server.authorization_id}"
            self._reauthenticating = False
            self._session_expires = None
            if self._reauth_ms:
                self._session_expires = self._now() + self._session_lifetime_ms(server) / 1000

    def _session_lifetime_ms(self, server: SaslServer) -> int:
        """connections.max.reauth.ms, or less for a credential that expires sooner (Kafka's rule)."""
        lifetime = self._reauth_ms
        expires_ms = getattr(server, "credential_expiration_ms", None)
        if expires_ms is not None:
            lifetime = min(lifetime, max(expires_ms - self._wall_ms(), 0))
        return lifetime

    @property
    def max_receive_size(self) -> int:
        """The largest frame taken before the exchange completes (sasl.server.max.receive.size)."""
        return self._max_receive_size


def _api_name(key: int) -> str:
    try:
        return ApiKey(key).name
    except ValueError:
        return str(key)

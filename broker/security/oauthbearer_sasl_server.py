"""OAuthBearerSaslServer: SASL/OAUTHBEARER (RFC 7628) with Kafka's unsecured-token validator.

The client's message is `n,[a=authzid],\\x01auth=Bearer <token>\\x01[key=value\\x01]...\\x01`. The
token is an unsecured JWS (`alg: none`), validated as Kafka's
OAuthBearerUnsecuredValidatorCallbackHandler does: the principal claim (`sub`, or
`unsecuredValidatorPrincipalClaimName`) and a numeric `exp` are required, `exp` must not be in the
past nor `iat`/`nbf` in the future beyond `unsecuredValidatorAllowableClockSkewMs`, and
`unsecuredValidatorRequiredScope` must all be in the scope claim. A token refused is answered, as
RFC 7628 and Kafka do, with a JSON error challenge (`{"status":"invalid_token"}`); the client's
`\\x01` in return ends the exchange with that JSON as the failure's message. For tests and
development only, as Kafka's; signed tokens (KIP-768) are oauthbearer_validator.py's.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from typing import Any, Callable, Mapping

from broker.security.sasl_server import SaslAuthenticationError, SaslCredentialsError

CONTROL_A = "\x01"
_BEARER = re.compile(r"[Bb][Ee][Aa][Rr][Ee][Rr] +(?P<token>[-_.a-zA-Z0-9]+)")


class OAuthBearerSaslServer:
    mechanism = "OAUTHBEARER"

    def __init__(self, options: Mapping[str, str], now_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self._principal_claim = options.get("unsecuredValidatorPrincipalClaimName", "").strip() or "sub"
        self._scope_claim = options.get("unsecuredValidatorScopeClaimName", "").strip() or "scope"
        self._required_scope = [s for s in options.get("unsecuredValidatorRequiredScope", "").split(" ") if s]
        self._skew_ms = int(options.get("unsecuredValidatorAllowableClockSkewMs", "0") or 0)
        self._now_ms = now_ms
        self._error: str | None = None
        self.is_complete = False
        self.authorization_id = ""
        self.credential_expiration_ms: int | None = None

    def evaluate_response(self, response: bytes) -> bytes:
        if response == b"\x01" and self._error is not None:
            raise SaslAuthenticationError(self._error)
        self._error = None
        authzid, token = _client_initial_response(response.decode("utf-8", errors="replace"))
        claims, missing_scope = self._validate(token)
        if claims is None:
            # Kafka's jsonErrorResponse, byte for byte.
            self._error = '{"status":"invalid_token"}' if missing_scope is None else f'{{"status":"insufficient_scope", "scope":"{missing_scope}"}}'
            return self._error.encode()
        assert claims is not None
        principal = str(claims[self._principal_claim])
        if authzid and authzid != principal:
            raise SaslAuthenticationError(
                f"Authentication failed: Client requested an authorization id ({authzid}) that is different from the token's principal name ({principal})"
            )
        self.authorization_id = principal
        # When the token stops being valid: a re-authenticating session ends no later (KIP-368).
        self.credential_expiration_ms = int(float(claims["exp"]) * 1000)
        self.is_complete = True
        return b""

    def _validate(self, token: str) -> tuple[dict[str, Any] | None, str | None]:
        """The token's claims, or None and the required scope it fails (None: invalid), as Kafka
        names it: the whole required list as Java prints a list."""
        invalid = None, None
        parts = token.split(".")
        if len(parts) != 3:
            return invalid
        try:
            header, claims = (json.loads(_b64url(p)) for p in parts[:2])
        except (ValueError, binascii.Error):
            return invalid
        if not isinstance(header, dict) or not isinstance(claims, dict) or header.get("alg") != "none" or parts[2]:
            return invalid
        now_ms = self._now_ms()
        exp = claims.get("exp")
        if not isinstance(exp, (int, float)) or isinstance(exp, bool) or exp * 1000 <= now_ms - self._skew_ms:
            return invalid
        for name in ("iat", "nbf"):
            value = claims.get(name)
            if value is not None and (not isinstance(value, (int, float)) or value * 1000 > now_ms + self._skew_ms):
                return invalid
        if not isinstance(claims.get(self._principal_claim), str) or not claims[self._principal_claim]:
            return invalid
        scope = claims.get(self._scope_claim, [])
        granted = scope.split() if isinstance(scope, str) else list(scope) if isinstance(scope, list) else []
        if any(s not in granted for s in self._required_scope):
            return None, "[" + ", ".join(self._required_scope) + "]"
        return claims, None


def _client_initial_response(text: str) -> tuple[str, str]:
    """(authorization id, token) of RFC 7628's client initial response."""
    m = re.fullmatch(r"n,(?:a=(?P<authzid>[^,]*))?,(?P<kvpairs>\x01.*\x01)", text, re.S)
    if m is None:
        raise SaslCredentialsError("Invalid OAUTHBEARER client first message")
    pairs = dict(kv.split("=", 1) for kv in m.group("kvpairs").strip(CONTROL_A).split(CONTROL_A) if "=" in kv)
    bearer = _BEARER.fullmatch(pairs.get("auth", ""))
    if bearer is None:
        raise SaslCredentialsError("Invalid OAUTHBEARER client first message: no auth=Bearer token")
    return m.group("authzid") or "", bearer.group("token")


def _b64url(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))

"""Signed OAuth tokens (KIP-768): OAUTHBEARER validated against the keys of a JWKS endpoint.

Kafka's OAuthBearerValidatorCallbackHandler, configured on a listener with
`listener.name.<l>.oauthbearer.sasl.server.callback.handler.class`, and its `sasl.oauthbearer.*`
configs (also listener-prefixed): `jwks.endpoint.url` (https:, http: or file:),
`jwks.endpoint.refresh.ms` (an hour), `expected.audience` (a list: the token's `aud` must hold one),
`expected.issuer`, `sub.claim.name` (sub), `scope.claim.name` (scope), `clock.skew.seconds` (30).
A token must be a JWS signed with a key of the endpoint (never `alg: none`), with `exp` and `iat`,
not expired and not issued in the future beyond the clock skew, and a principal claim. PyJWT does
the JOSE work: decoding, signatures, time, audience and issuer checks.

The keys are fetched when the listener starts (a broker that cannot reach its JWKS endpoint does
not start, as Kafka's) and refreshed by a background thread; a token signed with a key id the
broker does not know fails at once and brings the next refresh forward, as Kafka's
RefreshingHttpsJwks does, so that no handshake ever waits on the network.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jwt
import structlog

from broker.security.oauthbearer_sasl_server import OAuthBearerSaslServer

log = structlog.get_logger(__name__)

VALIDATOR_CALLBACK_HANDLERS = frozenset(
    {
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
        "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler",
    }
)
# JWS algorithms a JWKS key may sign with (none is never one).
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
# Kafka's floor between two refreshes brought forward by unknown key ids.
MIN_EXPEDITED_REFRESH_S = 10.0


@dataclass(frozen=True, slots=True)
class JwtValidatorConfig:
    jwks_endpoint_url: str
    jwks_refresh_ms: int = 3_600_000
    expected_audience: tuple[str, ...] = ()
    expected_issuer: str | None = None
    sub_claim_name: str = "sub"
    scope_claim_name: str = "scope"
    clock_skew_seconds: int = 30


class RefreshingJwks:
    def __init__(self, url: str, refresh_ms: int) -> None:
        # PyJWT fetches http(s) endpoints; a file: URL (which Kafka takes too, and PyJWT no
        # longer does) is read here.
        self._path = urllib.request.url2pathname(urllib.parse.urlparse(url).path) if url.startswith("file:") else None
        self._client = None if self._path is not None else jwt.PyJWKClient(url, cache_keys=False, cache_jwk_set=False)
        self._refresh_s = refresh_ms / 1000
        self._keys: dict[str, jwt.PyJWK] = {}
        self._wake = threading.Event()
        self._last_fetch = 0.0
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Fetch the keys now (raising if the endpoint cannot give them), then keep them fresh."""
        self._fetch()
        self._thread = threading.Thread(target=self._refresh_forever, name="jwks-refresh", daemon=True)
        self._thread.start()

    def key(self, kid: str | None) -> jwt.PyJWK | None:
        found = self._keys.get(kid or "")
        if found is None and time.monotonic() - self._last_fetch >= MIN_EXPEDITED_REFRESH_S:
            self._wake.set()
        return found

    def _fetch(self) -> None:
        if self._client is not None:
            jwk_set = self._client.get_jwk_set(refresh=True)
        else:
            assert self._path is not None
            with open(self._path, encoding="utf-8") as f:
                jwk_set = jwt.PyJWKSet.from_dict(json.load(f))
        self._keys = {k.key_id or "": k for k in jwk_set.keys}
        self._last_fetch = time.monotonic()

    def _refresh_forever(self) -> None:
        while True:
            self._wake.wait(self._refresh_s)
            self._wake.clear()
            try:
                self._fetch()
            except (jwt.PyJWKClientError, jwt.PyJWKSetError, OSError, ValueError) as e:
                log.warning("oauthbearer.jwks_refresh_failed", error=str(e))


class OAuthBearerJwtSaslServer(OAuthBearerSaslServer):
    """OAUTHBEARER whose tokens are signed JWTs, checked against ``jwks``."""

    def __init__(self, config: JwtValidatorConfig, jwks: RefreshingJwks, now_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        super().__init__({"unsecuredValidatorPrincipalClaimName": config.sub_claim_name, "unsecuredValidatorScopeClaimName": config.scope_claim_name}, now_ms)
        self._config = config
        self._jwks = jwks

    def _validate(self, token: str) -> tuple[dict[str, Any] | None, str | None]:
        invalid = None, None
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            return invalid
        key = self._jwks.key(header.get("kid"))
        if key is None:
            return invalid
        config = self._config
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=list(ALGORITHMS),
                audience=list(config.expected_audience) or None,
                issuer=config.expected_issuer,
                leeway=config.clock_skew_seconds,
                options={"require": ["exp", "iat"], "verify_aud": bool(config.expected_audience)},
            )
        except jwt.InvalidTokenError:
            return invalid
        principal = claims.get(config.sub_claim_name)
        if not isinstance(principal, str) or not principal:
            return invalid
        return claims, None


def validator_config(options: Mapping[str, str | None]) -> JwtValidatorConfig:
    """From the `sasl.oauthbearer.*` configs as the listener sees them (None: not set)."""
    url = options.get("sasl.oauthbearer.jwks.endpoint.url")
    if not url:
        raise ValueError("OAuthBearerValidatorCallbackHandler needs sasl.oauthbearer.jwks.endpoint.url")
    audience = tuple(a.strip() for a in (options.get("sasl.oauthbearer.expected.audience") or "").split(",") if a.strip())
    return JwtValidatorConfig(
        jwks_endpoint_url=url,
        jwks_refresh_ms=int(options.get("sasl.oauthbearer.jwks.endpoint.refresh.ms") or 3_600_000),
        expected_audience=audience,
        expected_issuer=options.get("sasl.oauthbearer.expected.issuer") or None,
        sub_claim_name=options.get("sasl.oauthbearer.sub.claim.name") or "sub",
        scope_claim_name=options.get("sasl.oauthbearer.scope.claim.name") or "scope",
        clock_skew_seconds=int(options.get("sasl.oauthbearer.clock.skew.seconds") or 30),
    )

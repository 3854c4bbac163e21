"""SaslHandshake and SaslAuthenticate outside a SASL exchange: on a listener without SASL, or a
SaslAuthenticate after the connection has authenticated, Kafka's KafkaApis and ControllerApis
answer ILLEGAL_SASL_STATE. During an exchange, re-authentication (KIP-368) included, the
connection's authenticator answers them (broker/security/sasl_server_authenticator.py)."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode

from broker.kafka_apis import RequestContext
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build


def sasl_handshake(ctx: RequestContext, request):  # type: ignore[no-untyped-def]
    return build(response_schema(ApiKey.SASL_HANDSHAKE, ctx.version), error_code=ErrorCode.illegal_sasl_state, mechanisms=())


def sasl_authenticate(ctx: RequestContext, request):  # type: ignore[no-untyped-def]
    return build(
        response_schema(ApiKey.SASL_AUTHENTICATE, ctx.version),
        error_code=ErrorCode.illegal_sasl_state,
        error_message="SaslAuthenticate request received after successful authentication",
        auth_bytes=b"",
        session_lifetime=datetime.timedelta(0),
    )

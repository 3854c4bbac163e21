"""InitProducerId: producer ids and epochs for idempotent (and, through the seam, transactional) producers."""

from __future__ import annotations

from typing import Protocol

import structlog
from kio.schema.errors import ErrorCode

from broker.auth_helper import AuthHelper
from broker.handlers.transactions import client_error
from broker.kafka_apis import RequestContext
from broker.producer_id_manager import ProducerIdManager, ProducerIdsUnavailableError
from broker.security.standard_acl import CLUSTER_NAME, AclOperation, ResourceType
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build

log = structlog.get_logger(__name__)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


class InitProducerIdResult(Protocol):
    @property
    def error_code(self) -> int: ...
    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...


class TransactionalInitProducerId(Protocol):
    """What the transaction coordinator offers this handler for a non-null transactional id."""

    async def init_producer_id(
        self, transactional_id: str, txn_timeout_ms: int, expected: tuple[int, int] | None, enable_2pc: bool = False, keep_prepared_txn: bool = False
    ) -> InitProducerIdResult:
        """``expected`` is the client's current (id, epoch) when it asks for a bump (KIP-360);
        ``enable_2pc`` and ``keep_prepared_txn`` are v6's KIP-939 flags."""
        ...


class InitProducerIdHandler:
    def __init__(self, producer_ids: ProducerIdManager, auth: AuthHelper | None = None) -> None:
        self._producer_ids = producer_ids
        self._auth = auth or AuthHelper(None)
        # Filled in by the transaction coordinator; until then a transactional id answers
        # COORDINATOR_NOT_AVAILABLE, which clients retry.
        self.transaction_coordinator: TransactionalInitProducerId | None = None

    async def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.INIT_PRODUCER_ID, ctx.version)
        if self._auth.enabled:
            # Kafka's first check, before the request itself is validated.
            refused = self._refused(ctx, request)
            if refused:
                return _answer(schema, refused)
        producer_id = getattr(request, "producer_id", NO_PRODUCER_ID)
        producer_epoch = getattr(request, "producer_epoch", NO_PRODUCER_EPOCH)
        if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
            return _answer(schema, ErrorCode.invalid_request)
        expected = None if producer_id == NO_PRODUCER_ID else (int(producer_id), int(producer_epoch))
        if request.transactional_id is not None:
            coordinator = self.transaction_coordinator
            if coordinator is None:
                return _answer(schema, ErrorCode.coordinator_not_available)
            timeout_ms = int(request.transaction_timeout.total_seconds() * 1000)
            # v6 (KIP-939): the flags go to the coordinator, which refuses them as Kafka 4.4 does.
            enable_2pc, keep_prepared_txn = bool(getattr(request, "enable2_pc", False)), bool(getattr(request, "keep_prepared_txn", False))
            result = await coordinator.init_producer_id(request.transactional_id, timeout_ms, expected, enable_2pc, keep_prepared_txn)
            # v6's OngoingTxnProducerId and OngoingTxnProducerEpoch stay -1: with no prepared
            # transaction ever kept there is none to name, as in every Kafka 4.4 answer without 2PC.
            return _answer(schema, client_error(ApiKey.INIT_PRODUCER_ID, ctx.version, result.error_code), result.producer_id, result.producer_epoch)
        # As Kafka: an idempotent producer always gets a fresh id at epoch 0, whatever v6's flags
        # (they are for transactions only; Kafka does not look at them). One that asks with
        # its current id and epoch (KIP-360, after an OUT_OF_ORDER_SEQUENCE_NUMBER or an
        # unknown producer) starts over under the new id, with no sequence state to conflict.
        try:
            new_id = await self._producer_ids.generate_producer_id()
        except ProducerIdsUnavailableError as e:
            return _answer(schema, e.error_code)
        return _answer(schema, ErrorCode.none, new_id, 0)

    def _refused(self, ctx: RequestContext, request) -> int:  # type: ignore[no-untyped-def]
        transactional_id = request.transactional_id
        if transactional_id is not None:
            if not self._auth.authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
                return ErrorCode.transactional_id_authorization_failed
            # v6 (KIP-939): Enable2Pc needs TWO_PHASE_COMMIT on the transactional id as well.
            if getattr(request, "enable2_pc", False) and not self._auth.authorize(ctx, AclOperation.TWO_PHASE_COMMIT, ResourceType.TRANSACTIONAL_ID, transactional_id):
                return ErrorCode.transactional_id_authorization_failed
            return ErrorCode.none
        # An idempotent producer: IDEMPOTENT_WRITE on the cluster (its denial not logged), or
        # WRITE on some topic, which is what KIP-679 made enough.
        if self._auth.authorize(ctx, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False):
            return ErrorCode.none
        if self._auth.authorize_by_resource_type(ctx, AclOperation.WRITE, ResourceType.TOPIC):
            return ErrorCode.none
        return ErrorCode.cluster_authorization_failed


def _answer(schema: type, error: int, producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH):  # type: ignore[no-untyped-def]
    return build(schema, throttle_time=0, error_code=error, producer_id=producer_id, producer_epoch=producer_epoch)

"""Metadata: brokers, controller, topics and their partition leaders; auto-creates topics."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from broker.auth_helper import AuthHelper
from broker.auto_topic_creation_manager import AutoTopicCreationManager
from broker.kafka_apis import RequestContext
from broker.metadata.metadata_cache import MetadataCache
from broker.metrics.request_errors import ErrorCounts, count_response
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, nested
from protocol.messages import encode_body, response_frame
from broker.metadata.metadata_image import MetadataImage, TopicImage
from broker.security.standard_acl import CLUSTER_NAME, AclOperation, ResourceType

# Kafka's Topic.INTERNAL_TOPICS.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
AUTHORIZED_OPERATIONS_UNKNOWN = -2147483648


# Metadata v10 and v11 carry a topic id field, but only v12 may name a topic by it.
FIRST_TOPIC_ID_VERSION = 12


def _names_by_id(entry) -> bool:  # type: ignore[no-untyped-def]
    """A v10/v11 topic given by id (a null name or a non-zero id): Kafka's KafkaApis throws
    InvalidRequestException, answered by MetadataRequest.getErrorResponse with INVALID_REQUEST
    for every requested topic (a null name answered as "", the response allowing none)."""
    topic_id = getattr(entry, "topic_id", None)
    return entry.name is None or (topic_id is not None and topic_id.int != 0)


class MetadataHandler:
    def __init__(self, metadata: MetadataCache, controller: AutoTopicCreationManager, auto_create_enabled: bool, auth: AuthHelper | None = None) -> None:
        self._metadata = metadata
        self._auth = auth or AuthHelper(None)
        self._controller = controller
        self._auto_create = auto_create_enabled
        # (API version, listener) -> ((image id, image provenance), encoded body, its ErrorsPerSec
        # counts) of the all-topics answer.
        self._all_topics_bodies: dict[tuple[int, str], tuple[tuple[int, int], bytes, ErrorCounts]] = {}

    def __call__(self, ctx: RequestContext, request):  # type: ignore[no-untyped-def]
        version = ctx.version
        image = self._metadata.image
        requested = request.topics
        auth = self._auth
        if requested is None or (version == 0 and not requested):
            if auth.enabled:
                # Kafka's: topics the principal may not describe are left out, not refused.
                allowed = auth.filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, image.topics, log_if_denied=False)
                topics = [(t.name, t.topic_id, 0, t) for t in image.topics.values() if t.name in allowed]
                return self._response(version, ctx.client.listener, topics, self._operations(ctx, request), self._cluster_operations(ctx, request))
            return self._all_topics(ctx, image)
        if version < FIRST_TOPIC_ID_VERSION and any(_names_by_id(entry) for entry in requested):
            return self._response(version, ctx.client.listener, [(entry.name or "", entry.topic_id, ErrorCode.invalid_request, None) for entry in requested])
        allow = getattr(request, "allow_auto_topic_creation", True) and self._auto_create
        may_create = not (auth.enabled and allow) or auth.authorize(ctx, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False)
        topics: list[tuple[str | None, uuid.UUID | None, int, TopicImage | None]] = []
        missing: list[str] = []
        for entry in requested:
            name = getattr(entry, "name", None)
            topic_id = getattr(entry, "topic_id", None)
            if name is None and topic_id is not None and topic_id.int != 0:
                found = image.topics_by_id.get(topic_id)
                if found is not None and not auth.authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, found.name):
                    # Topic ids are not secret: Kafka refuses one by its id, without its name.
                    topics.append((None, topic_id, ErrorCode.topic_authorization_failed, None))
                    continue
                topics.append((found.name if found else None, topic_id, 0 if found else ErrorCode.unknown_topic_id, found))
                continue
            if name is not None and not auth.authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                # Whether it exists is not told.
                topics.append((name, None, ErrorCode.topic_authorization_failed, None))
                continue
            found = image.topics.get(name) if name is not None else None
            if found is None and name is not None:
                if allow and not may_create and not auth.authorize(ctx, AclOperation.CREATE, ResourceType.TOPIC, name):
                    topics.append((name, None, ErrorCode.topic_authorization_failed, None))
                    continue
                missing.append(name)
            topics.append((name, found.topic_id if found else None, 0 if found else ErrorCode.unknown_topic_or_partition, found))
        operations = self._operations(ctx, request), self._cluster_operations(ctx, request)
        if missing and allow:
            return self._create_then_respond(version, ctx.client.listener, topics, missing, operations)
        return self._response(version, ctx.client.listener, topics, *operations)

    def _operations(self, ctx: RequestContext, request) -> Callable[[str | None], int] | None:  # type: ignore[no-untyped-def]
        """KIP-430: each topic's authorized operations, when the client asks for them (v8+)."""
        if ctx.version < 8 or not getattr(request, "include_topic_authorized_operations", False):
            return None
        return lambda name: self._auth.authorized_operations(ctx, ResourceType.TOPIC, name) if name else AUTHORIZED_OPERATIONS_UNKNOWN

    def _cluster_operations(self, ctx: RequestContext, request) -> int:  # type: ignore[no-untyped-def]
        if not 8 <= ctx.version <= 10 or not getattr(request, "include_cluster_authorized_operations", False):
            return AUTHORIZED_OPERATIONS_UNKNOWN
        if not self._auth.authorize_cluster(ctx, AclOperation.DESCRIBE):
            return 0
        return self._auth.authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)

    def _all_topics(self, ctx: RequestContext, image: MetadataImage) -> list[bytes]:
        """Every topic, encoded once per metadata change and API version: with 10,000 partitions
        building and encoding the answer took 135-270 ms, and admin clients ask for it often."""
        key = (id(image), image.provenance)
        cached = self._all_topics_bodies.get((ctx.version, ctx.client.listener))
        if cached is None or cached[0] != key:
            topics = [(t.name, t.topic_id, 0, t) for t in image.topics.values()]
            response = self._response(ctx.version, ctx.client.listener, topics)
            counts: ErrorCounts = {}
            count_response(counts, ApiKey.METADATA, response)
            cached = (key, encode_body(response), counts)
            self._all_topics_bodies[(ctx.version, ctx.client.listener)] = cached
        if ctx.errors is not None:
            for code, n in cached[2].items():
                ctx.errors[code] = ctx.errors.get(code, 0) + n
        return response_frame(ApiKey.METADATA, ctx.version, ctx.header.correlation_id, cached[1])

    async def _create_then_respond(self, version, listener: str, topics, missing: list[str], operations):  # type: ignore[no-untyped-def]
        created = await self._controller.auto_create_topics(missing)
        image = self._metadata.image
        return self._response(version, listener, [self._after_create(entry, image, created) for entry in topics], *operations)

    @staticmethod
    def _after_create(entry, image, created: dict[str, int]):  # type: ignore[no-untyped-def]
        name, topic_id, error, found = entry
        if found is not None or name not in created:
            return entry
        if created[name]:
            return (name, None, created[name], None)
        topic = image.topics.get(name)
        if topic is None:
            return (name, None, ErrorCode.leader_not_available, None)
        return (name, topic.topic_id, 0, topic)

    def _response(self, version: int, listener: str, topics, operations: Callable[[str | None], int] | None = None, cluster_operations: int = AUTHORIZED_OPERATIONS_UNKNOWN):  # type: ignore[no-untyped-def]
        schema = response_schema(ApiKey.METADATA, version)
        broker_cls = nested(schema, "MetadataResponseBroker")
        topic_cls = nested(schema, "MetadataResponseTopic")
        part_cls = nested(schema, "MetadataResponsePartition")
        brokers = tuple(build(broker_cls, node_id=b.node_id, host=b.host, port=b.port, rack=b.rack) for b in self._metadata.alive_brokers(listener))
        out = []
        for name, topic_id, error, topic in topics:
            parts = ()
            if topic is not None:
                parts = tuple(
                    build(
                        part_cls,
                        error_code=0,
                        partition_index=index,
                        leader_id=reg.leader,
                        leader_epoch=reg.leader_epoch,
                        replica_nodes=tuple(reg.replicas),
                        isr_nodes=tuple(reg.isr),
                        offline_replicas=(),
                    )
                    for index, reg in sorted(topic.partitions.items())
                )
            out.append(
                build(
                    topic_cls,
                    error_code=error,
                    name=name,
                    topic_id=topic_id or uuid.UUID(int=0),
                    is_internal=name in INTERNAL_TOPICS,
                    partitions=parts,
                    topic_authorized_operations=AUTHORIZED_OPERATIONS_UNKNOWN if operations is None or error else operations(name),
                )
            )
        return build(
            schema,
            throttle_time=0,
            brokers=brokers,
            cluster_id=self._metadata.cluster_id,
            controller_id=self._metadata.controller_id,
            topics=tuple(out),
            cluster_authorized_operations=cluster_operations,
            # v13 (KIP-1102): REBOOTSTRAP_REQUIRED is for a server that knows its client's brokers are
            # gone; an answering broker, as Kafka's, has no top-level error.
            error_code=ErrorCode.none,
        )

"""AutoTopicCreationManager: topics a broker creates on its own, through the active controller.

A Metadata request naming a missing topic (with auto.create.topics.enable) and the group and
transaction coordinators' internal topics on their first use are created as any client's
CreateTopics would be: sent to the controller, committed in the metadata log, and seen by this
broker once its metadata image has the records.
"""

from __future__ import annotations

import datetime

import structlog
from kio.schema.create_topics.v7.request import CreatableTopic as CreatableTopicEntity
from kio.schema.create_topics.v7.request import CreatableTopicConfig, CreateTopicsRequest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32

from broker.controller.controller_logic import CreatableTopic
from broker.controller_channel import ControllerChannel, ControllerUnavailableError

log = structlog.get_logger(__name__)

CREATE_TIMEOUT_MS = 30000


class AutoTopicCreationManager:
    def __init__(self, channel: ControllerChannel) -> None:
        self._channel = channel

    async def create_topics(self, topics: list[CreatableTopic], timeout_ms: int = CREATE_TIMEOUT_MS) -> dict[str, int]:
        """Each topic's error code: 0 when it was created or already existed."""
        out = {}
        for name, (code, message) in (await self.create_topic_results(topics, timeout_ms)).items():
            out[name] = 0 if code == ErrorCode.topic_already_exists.value else code
            if out[name] != 0:
                log.warning("auto_topic_creation.refused", topic=name, error=ErrorCode(code).name, message=message)
        return out

    async def create_topic_results(self, topics: list[CreatableTopic], timeout_ms: int = CREATE_TIMEOUT_MS) -> dict[str, tuple[int, str | None]]:
        """Each topic's error code and message as the controller answered them (REQUEST_TIMED_OUT,
        with no message, when no controller answered)."""
        request = CreateTopicsRequest(
            topics=tuple(
                CreatableTopicEntity(
                    name=t.name,
                    num_partitions=i32(t.num_partitions),
                    replication_factor=i16(t.replication_factor),
                    assignments=(),
                    configs=tuple(CreatableTopicConfig(name=k, value=v) for k, v in t.configs.items()),
                )
                for t in topics
            ),
            timeout=datetime.timedelta(milliseconds=timeout_ms),
            validate_only=False,
        )
        try:
            response = await self._channel.send(request, timeout_ms=timeout_ms)
        except ControllerUnavailableError as e:
            log.warning("auto_topic_creation.failed", topics=[t.name for t in topics], error=str(e))
            return {t.name: (ErrorCode.request_timed_out.value, None) for t in topics}
        return {result.name: (result.error_code.value, result.error_message) for result in response.topics}

    async def auto_create_topics(self, names: list[str]) -> dict[str, int]:
        """Topics a Metadata request named, with the controller's default partitions and replication factor."""
        return await self.create_topics([CreatableTopic(name=n, num_partitions=-1, replication_factor=-1, assignments=None, configs={}) for n in dict.fromkeys(names)])

"""
Written as kio generates from ``clients/src/main/resources/common/message/StreamsGroupTopologyDescriptionUpdateResponse.json`` (Kafka 4.4).

One departure: ErrorCode is the spec's plain int16, not kio's ErrorCode, because one of the answers
this API names, STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED (135), is newer than kio 0.6.5's ErrorCode.
"""

from dataclasses import dataclass
from dataclasses import field
from typing import ClassVar

from kio.schema.response_header.v1.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import i16
from kio.static.primitive import i32Timedelta

__all__ = ("StreamsGroupTopologyDescriptionUpdateResponse",)


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupTopologyDescriptionUpdateResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(93)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    """The duration in milliseconds for which the request was throttled due to a quota violation, or zero if the request did not violate any quota."""
    error_code: i16 = field(metadata={"kafka_type": "int16"})
    """The top-level error code, or 0 if there was no error."""
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """The top-level error message, or null if there was no error."""

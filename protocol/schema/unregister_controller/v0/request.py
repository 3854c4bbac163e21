"""
Written as kio generates from ``clients/src/main/resources/common/message/UnregisterControllerRequest.json`` (Kafka 4.4).
"""

from dataclasses import dataclass
from dataclasses import field
from typing import ClassVar

from kio.schema.request_header.v2.header import RequestHeader
from kio.static.constants import EntityType
from kio.static.primitive import i16
from kio.static.primitive import i32


@dataclass(frozen=True, slots=True, kw_only=True)
class UnregisterControllerRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(94)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    controller_id: i32 = field(metadata={"kafka_type": "int32"})
    """The controller ID to unregister."""

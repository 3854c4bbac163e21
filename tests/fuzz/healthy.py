"""The healthy client that runs beside the fuzzing connections: after every burst it must still be
served (ApiVersions, Metadata, an acks=all Produce at the next offset), and at the end a full
Fetch must return exactly what it produced.

It speaks the protocol over a raw socket through the fuzzer's own encoder and kio's response
readers, on one long-lived connection: a broker that disturbed other connections would show here.
"""

from __future__ import annotations

import datetime
import socket
import struct
import time
from typing import Any

from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.create_topics.v4 import request as create_topics
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v4 import request as fetch
from kio.schema.metadata.v1 import request as metadata
from kio.schema.produce.v3 import request as produce
from kio.serial import entity_reader

from protocol.api_keys import response_schema
from tests.fuzz.wire import encode, request_header, size_prefixed
from tests.unit.batch_factory import decode_records, make_batch

# Generous: the machine is shared, and a broker busy creating thousands of partitions for a
# fuzzed CreateTopics is slow, not broken.
IO_TIMEOUT_S = 30.0


class Unhealthy(AssertionError):
    pass


class HealthyClient:
    def __init__(self, host: str, port: int, topic: str) -> None:
        self.address = (host, port)
        self.topic = topic
        self.produced: list[bytes] = []
        self._correlation = 0
        self._sock = socket.create_connection(self.address, timeout=IO_TIMEOUT_S)
        self._sock.settimeout(IO_TIMEOUT_S)

    def close(self) -> None:
        self._sock.close()

    def request(self, body: Any) -> Any:
        api_key, version = int(body.__api_key__), int(body.__version__)
        self._correlation += 1
        payload, _ = encode(body)
        self._sock.sendall(size_prefixed(request_header(api_key, version, self._correlation, "fuzz-healthy", False) + payload))
        (size,) = struct.unpack(">i", self._recv(4))
        frame = self._recv(size)
        (correlation,) = struct.unpack_from(">i", frame)
        if correlation != self._correlation:
            raise Unhealthy(f"answer to correlation id {correlation}, expected {self._correlation}")
        response, _ = entity_reader(response_schema(api_key, version))(memoryview(frame[4:]).toreadonly(), 0)
        return response

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        deadline = time.monotonic() + IO_TIMEOUT_S
        while len(buf) < n:
            if time.monotonic() > deadline:
                raise Unhealthy(f"no answer within {IO_TIMEOUT_S} s")
            try:
                chunk = self._sock.recv(n - len(buf))
            except TimeoutError:
                raise Unhealthy(f"no answer within {IO_TIMEOUT_S} s") from None
            if not chunk:
                raise Unhealthy("the broker closed the healthy client's connection")
            buf += chunk
        return bytes(buf)

    def create_topic(self) -> None:
        topic = create_topics.CreatableTopic(name=self.topic, num_partitions=1, replication_factor=1, assignments=(), configs=())
        response = self.request(create_topics.CreateTopicsRequest(topics=(topic,), timeout=datetime.timedelta(seconds=10), validate_only=False))
        error = response.topics[0].error_code
        if error not in (ErrorCode.none, ErrorCode.topic_already_exists):
            raise Unhealthy(f"create topic {self.topic}: {error!r}")

    def check(self, label: str) -> None:
        """ApiVersions, Metadata and one acks=all Produce that lands at the next offset."""
        versions = self.request(ApiVersionsRequest())
        if versions.error_code != ErrorCode.none or not versions.api_keys:
            raise Unhealthy(f"{label}: ApiVersions answered {versions.error_code!r}")
        meta = self.request(metadata.MetadataRequest(topics=(metadata.MetadataRequestTopic(name=self.topic),)))
        if meta.topics[0].error_code != ErrorCode.none:
            raise Unhealthy(f"{label}: Metadata answered {meta.topics[0].error_code!r}")
        value = f"healthy-{len(self.produced)}-{label}".encode()
        # Stamped now: a batch from the past would be removed by retention.ms during a long run.
        batch = make_batch([value], base_timestamp=int(time.time() * 1000))
        partition = produce.PartitionProduceData(index=0, records=bytes(batch))
        request = produce.ProduceRequest(
            transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10), topic_data=(produce.TopicProduceData(name=self.topic, partition_data=(partition,)),)
        )
        answer = self.request(request).responses[0].partition_responses[0]
        if answer.error_code != ErrorCode.none or answer.base_offset != len(self.produced):
            raise Unhealthy(f"{label}: produce answered {answer.error_code!r} at offset {answer.base_offset}, expected {len(self.produced)}")
        self.produced.append(value)

    def read_all(self) -> list[bytes]:
        """Every record of the topic, fetched from offset 0 until the high watermark."""
        values: list[bytes] = []
        for _ in range(10_000):
            if len(values) >= len(self.produced):
                break
            part = fetch.FetchPartition(partition=0, fetch_offset=len(values), partition_max_bytes=1 << 20)
            request = fetch.FetchRequest(
                replica_id=-1, max_wait=datetime.timedelta(milliseconds=100), min_bytes=1, max_bytes=1 << 20, isolation_level=0, topics=(fetch.FetchTopic(topic=self.topic, partitions=(part,)),)
            )
            data = self.request(request).responses[0].partitions[0]
            if data.error_code != ErrorCode.none:
                raise Unhealthy(f"fetch at {len(values)} answered {data.error_code!r}")
            got = [(offset, value) for offset, _, _, value in decode_records(data.records or b"") if offset >= len(values)]
            if not got:
                break
            for offset, value in got:
                if offset != len(values):
                    raise Unhealthy(f"fetch returned offset {offset} where {len(values)} was next")
                values.append(value or b"")
        return values

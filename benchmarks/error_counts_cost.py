"""Per-answer cost of ErrorsPerSec (broker/metrics/request_errors.py), beside the cost of encoding
the same answer: what counting adds to a request when metrics.listener is set.

Produce and Fetch count the codes of the partitions they answer as they build the answer
(broker/handlers/produce.py ``_count_errors``, broker/handlers/fetch.py ``_respond`` and
``_topics``); every other answer is walked by ``count_response``.

    python -m benchmarks.error_counts_cost
"""

from __future__ import annotations

import argparse
import time
import timeit
import uuid
from types import SimpleNamespace
from typing import Any, Callable

from broker.handlers.produce import _count_errors
from broker.metrics.request_errors import ErrorCounts, add, count_response
from broker.replica_manager import ProduceResult
from protocol.api_keys import ApiKey, response_schema
from protocol.entities import build, nested
from protocol.fetch_response import FetchPartitionResult, FetchTopicResult, encode_fetch_response
from protocol.messages import encode_response
from protocol.produce_response import encode_produce_response

REPEATS = 7


def ns_per_call(fn: Callable[[], Any]) -> float:
    """The CPU time of one call in ns, the least over REPEATS runs: on a busy machine wall time
    counts the other processes' turns, and the least run is the one they disturbed least."""
    timer = timeit.Timer(fn, timer=time.process_time)
    number, _ = timer.autorange()
    return min(t / number * 1e9 for t in timer.repeat(REPEATS, max(number, 1000)))


def produce(partitions: int) -> tuple[float, float]:
    topics = [("t", uuid.uuid4(), [(i, ProduceResult(error_code=0, base_offset=i)) for i in range(partitions)])]
    ctx = SimpleNamespace(errors={})
    return ns_per_call(lambda: _count_errors(ctx, topics)), ns_per_call(lambda: encode_produce_response(11, 7, topics))  # type: ignore[arg-type]


def fetch(partitions: int) -> tuple[float, float]:
    parts = [FetchPartitionResult(i, high_watermark=100, last_stable_offset=100, log_start_offset=0) for i in range(partitions)]
    topics = [FetchTopicResult("t", uuid.uuid4(), parts)]
    errors: ErrorCounts = {}
    by_topic = {"t": parts}

    def count() -> None:
        # What _respond and _topics add when every partition was read: the top-level NONE, and
        # the partitions' NONE per topic (an error partition adds its code on its own).
        add(errors, 0)
        read_ok = 0
        for ps in by_topic.values():
            read_ok += len(ps)
        if read_ok:
            errors[0] = errors.get(0, 0) + read_ok

    return ns_per_call(count), ns_per_call(lambda: encode_fetch_response(16, 7, topics))


def entity(key: ApiKey, version: int, response: Any) -> tuple[float, float]:
    counts: ErrorCounts = {}
    return ns_per_call(lambda: count_response(counts, key, response)), ns_per_call(lambda: encode_response(key, version, 7, response))


def metadata(topics: int, partitions: int) -> Any:
    schema = response_schema(ApiKey.METADATA, 12)
    topic_cls, part_cls, broker_cls = nested(schema, "MetadataResponseTopic"), nested(schema, "MetadataResponsePartition"), nested(schema, "MetadataResponseBroker")
    return build(
        schema,
        throttle_time=0,
        brokers=tuple(build(broker_cls, node_id=i, host="127.0.0.1", port=9092 + i, rack=None) for i in range(3)),
        cluster_id="c",
        controller_id=1,
        topics=tuple(
            build(
                topic_cls,
                error_code=0,
                name=f"t{t}",
                topic_id=uuid.uuid4(),
                is_internal=False,
                partitions=tuple(build(part_cls, error_code=0, partition_index=p, leader_id=1, replica_nodes=(1, 2, 3), isr_nodes=(1, 2, 3)) for p in range(partitions)),
            )
            for t in range(topics)
        ),
    )


def main() -> None:
    argparse.ArgumentParser(description="CPU time of ErrorsPerSec's counting per answer, beside the answer's encoding.").parse_args()
    heartbeat = build(response_schema(ApiKey.HEARTBEAT, 4), throttle_time=0, error_code=0)
    rows = [
        ("Produce, 1 partition", produce(1)),
        ("Produce, 100 partitions", produce(100)),
        ("Fetch, 1 partition", fetch(1)),
        ("Fetch, 100 partitions", fetch(100)),
        ("Heartbeat v4 (walk)", entity(ApiKey.HEARTBEAT, 4, heartbeat)),
        ("Metadata v12, 10 x 10 partitions (walk)", entity(ApiKey.METADATA, 12, metadata(10, 10))),
    ]
    print(f"{'answer':42} {'count ns':>10} {'encode ns':>10} {'count/encode':>12}")
    for name, (count_ns, encode_ns) in rows:
        print(f"{name:42} {count_ns:10.0f} {encode_ns:10.0f} {count_ns / encode_ns:12.1%}")


if __name__ == "__main__":
    main()

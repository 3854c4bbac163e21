"""Offset bookkeeping for the `kbroker` source: sans-IO, the same rules as Spark's Kafka connector.

An offset map is {(topic, partition): next offset to read}. In Spark's checkpoint it is the
connector's JSON shape, {"topic": {"0": 23, "1": 7}}, written in sorted order: Spark compares
serialized offsets to decide whether a micro-batch has new data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from spark_jobs.options import EARLIEST, LATEST, KBrokerOptionError, OffsetSpec, TopicPartition

OffsetMap = dict[TopicPartition, int]


class DataLossError(RuntimeError):
    """Records the query was meant to read are gone; raised only with failOnDataLoss=true."""


DATA_LOSS_HINT = (
    " Some data may have been lost because they are not available in Kafka any more; either the data was aged out "
    "by Kafka or the topic may have been deleted before all the data in the topic was processed. If you don't want "
    "your streaming query to fail on such cases, set the source option 'failOnDataLoss' to 'false'."
)


@dataclass(frozen=True)
class OffsetRange:
    """One input partition: records [start, end) of one Kafka partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def from_json(offsets: Mapping[str, Mapping[str, int]]) -> OffsetMap:
    return {(topic, int(p)): int(o) for topic, parts in offsets.items() for p, o in parts.items()}


def resolve(spec: OffsetSpec, earliest: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], name: str) -> OffsetMap:
    """Concrete offsets for every partition in `latest`; partitions the JSON leaves out take the default."""
    given = spec.as_dict()
    missing = sorted(set(given) - set(latest))
    if missing:
        raise KBrokerOptionError(f"Option '{name}' names partitions that do not exist: {missing}")
    out: OffsetMap = {}
    for tp in latest:
        offset = given.get(tp, spec.default)
        out[tp] = earliest[tp] if offset == EARLIEST else latest[tp] if offset == LATEST else offset
    return out


def rate_limit(limit: int, start: Mapping[TopicPartition, int], until: Mapping[TopicPartition, int], earliest_of_new: Mapping[TopicPartition, int]) -> OffsetMap:
    """At most about `limit` records, shared out by each partition's backlog (KafkaMicroBatchStream.rateLimit).

    A partition whose share is under one record still gets one, so small partitions are not
    starved; the total may thus pass `limit` by at most the number of partitions.
    """
    sizes: dict[TopicPartition, int] = {}
    for tp, end in until.items():
        begin = start.get(tp, earliest_of_new.get(tp))
        if begin is not None and end - begin > 0:
            sizes[tp] = end - begin
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(until)
    out: OffsetMap = {}
    for tp, end in until.items():
        if tp not in sizes:
            out[tp] = end
            continue
        prorate = limit * (sizes[tp] / total)
        share = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(end, start.get(tp, earliest_of_new.get(tp, 0)) + share)
    return out


def plan_ranges(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int], earliest_of_new: Mapping[TopicPartition, int], fail_on_data_loss: bool) -> tuple[list[OffsetRange], list[str]]:
    """The non-empty ranges of one micro-batch, and the data-loss warnings to log.

    A partition new since `start` is read from its earliest offset (as Spark does). A partition
    gone from `end`, or one whose end fell below its start, lost data: an error with
    failOnDataLoss, otherwise a warning and the partition is skipped.
    """
    losses: list[str] = []
    for tp in sorted(set(start) - set(end)):
        losses.append(f"{tp[0]}-{tp[1]} is gone (deleted topic or partition); offsets up to {start[tp]} were read.")
    ranges: list[OffsetRange] = []
    for tp, until in sorted(end.items()):
        begin = start.get(tp, earliest_of_new.get(tp, 0))
        if until < begin:
            losses.append(f"{tp[0]}-{tp[1]}'s offset went back from {begin} to {until}.")
        elif until > begin:
            ranges.append(OffsetRange(tp[0], tp[1], begin, until))
    if losses and fail_on_data_loss:
        raise DataLossError(" ".join(losses) + DATA_LOSS_HINT)
    return ranges, losses

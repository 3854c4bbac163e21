"""Sans-IO parts of the `kbroker` source: option checks and offset planning (no Spark session, no broker)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_jobs.offsets import DataLossError, from_json, plan_ranges, rate_limit, resolve, to_json
from spark_jobs.options import EARLIEST, LATEST, KBrokerOptionError, OffsetSpec, Subscription, sink_options, source_options
from spark_jobs.records import check_sink_columns

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "a,b"}


def test_defaults_follow_spark() -> None:
    stream = source_options(BASE, streaming=True)
    batch = source_options(BASE, streaming=False)
    assert stream.subscription == Subscription(topics=("a", "b"))
    assert (stream.starting.default, batch.starting.default, batch.ending.default) == (LATEST, EARLIEST, LATEST)
    assert stream.fail_on_data_loss and not stream.include_headers and stream.max_offsets_per_trigger is None


def test_kafka_options_reach_the_client_and_reserved_ones_are_refused() -> None:
    opts = source_options({**BASE, "kafka.isolation.level": "read_committed", "kafka.group.id": "mine"}, streaming=True)
    conf = opts.consumer_config("generated")
    assert conf["isolation.level"] == "read_committed" and conf["group.id"] == "mine"
    with pytest.raises(KBrokerOptionError, match="'auto.offset.reset' is not supported"):
        source_options({**BASE, "kafka.auto.offset.reset": "earliest"}, streaming=True)
    assert sink_options({"kafka.bootstrap.servers": "h:1"}).producer_config()["partitioner"] == "murmur2_random"


@pytest.mark.parametrize(
    ("extra", "streaming", "message"),
    [
        ({"endingOffsets": "latest"}, True, "Ending offset not valid in streaming queries"),
        ({"startingOffsets": "latest"}, False, "startingOffsets 'latest' is not allowed"),
        ({"startingOffsets": '{"a": {"0": -1}}'}, False, "offset -1 is not allowed"),
        ({"endingOffsets": '{"a": {"0": -2}}'}, False, "offset -2 is not allowed"),
        ({"startingOffsets": '{"zzz": {"0": 1}}'}, True, "outside the subscription"),
        ({"startingOffsets": '{"a": {"x": 1}}'}, True, "bad partition/offset"),
        ({"startingOffsets": "[1, 2]"}, True, "must be earliest, latest or a JSON object"),
        ({"maxOffsetsPerTrigger": "0"}, True, "must be a positive integer"),
        ({"failOnDataLoss": "maybe"}, True, "must be 'true' or 'false'"),
    ],
)
def test_bad_offsets_and_flags(extra: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(KBrokerOptionError, match=message):
        source_options({**BASE, **extra}, streaming=streaming)


def test_subscriptions() -> None:
    pattern = source_options({"kafka.bootstrap.servers": "h:1", "subscribePattern": "clicks-.*"}, streaming=True).subscription
    assert pattern.matches("clicks-eu") and not pattern.matches("xclicks-eu") and not pattern.matches("__consumer_offsets")
    assigned = source_options({"kafka.bootstrap.servers": "h:1", "assign": '{"t": [1, 0]}'}, streaming=True).subscription
    assert assigned.assigned == (("t", 0), ("t", 1))
    with pytest.raises(KBrokerOptionError, match="Option 'assign' must be"):
        source_options({"kafka.bootstrap.servers": "h:1", "assign": '{"t": [-1]}'}, streaming=True)


def test_sink_columns() -> None:
    check_sink_columns({"value": "binary", "key": "string", "partition": "int"}, "t")
    with pytest.raises(KBrokerOptionError, match="key attribute type must be string or binary"):
        check_sink_columns({"value": "binary", "key": "bigint"}, "t")
    with pytest.raises(KBrokerOptionError, match="Required attribute 'value' not found"):
        check_sink_columns({"key": "string"}, "t")


def test_resolve_specific_and_default_offsets() -> None:
    earliest, latest = {("a", 0): 3, ("a", 1): 0}, {("a", 0): 10, ("a", 1): 7}
    spec = OffsetSpec(LATEST, ((("a", 0), EARLIEST),))
    assert resolve(spec, earliest, latest, "startingOffsets") == {("a", 0): 3, ("a", 1): 7}
    with pytest.raises(KBrokerOptionError, match="do not exist"):
        resolve(OffsetSpec(LATEST, ((("a", 5), 1),)), earliest, latest, "startingOffsets")


def test_offsets_json_is_sorted_and_round_trips() -> None:
    offsets = {("b", 1): 5, ("a", 10): 1, ("a", 2): 7}
    assert list(to_json(offsets)) == ["a", "b"] and list(to_json(offsets)["a"]) == ["2", "10"]
    assert from_json(to_json(offsets)) == offsets


def test_plan_ranges_new_partitions_and_data_loss() -> None:
    ranges, losses = plan_ranges({("a", 0): 5}, {("a", 0): 9, ("a", 1): 4}, {("a", 1): 1}, fail_on_data_loss=True)
    assert [(r.partition, r.start, r.end) for r in ranges] == [(0, 5, 9), (1, 1, 4)] and not losses
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        plan_ranges({("a", 0): 5}, {("a", 0): 3}, {}, fail_on_data_loss=True)
    ranges, losses = plan_ranges({("a", 0): 5, ("gone", 0): 2}, {("a", 0): 3}, {}, fail_on_data_loss=False)
    assert ranges == [] and len(losses) == 2


backlogs = st.dictionaries(st.tuples(st.sampled_from("abc"), st.integers(0, 5)), st.tuples(st.integers(0, 1000), st.integers(0, 5000)), max_size=12)


@given(backlogs, st.integers(1, 20_000))
def test_rate_limit_stays_within_start_and_end(parts: dict[tuple[str, int], tuple[int, int]], limit: int) -> None:
    start = {tp: s for tp, (s, _) in parts.items()}
    until = {tp: s + n for tp, (s, n) in parts.items()}
    limited = rate_limit(limit, start, until, {})
    assert set(limited) == set(until)
    for tp in until:
        assert start[tp] <= limited[tp] <= until[tp]
    taken = sum(limited[tp] - start[tp] for tp in until)
    backlog = sum(until[tp] - start[tp] for tp in until)
    # Never more than the limit plus one record per partition (small partitions are not starved).
    assert taken <= limit + len(until)
    assert taken == backlog if backlog <= limit else taken >= min(backlog, limit) - len(until)

"""broker/metrics/share_group_metrics.py and share_coordinator_metrics.py: what the share paths
count, as Kafka 4.4's ShareGroupMetrics, SharePartitionMetrics, BrokerTopicMetrics' share meters,
group-coordinator-metrics' share part and share-coordinator-metrics count it; read back through
prometheus_client's text parser. The manager's counting is driven through a real
SharePartitionManager over the fake log and persister of its own tests."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from broker.group.share_group import ShareGroup, ShareGroupMember
from broker.metrics.broker_topic_metrics import BrokerTopicMetricsCollector, BrokerTopicStats
from broker.metrics.share_coordinator_metrics import ShareCoordinatorMetrics, ShareCoordinatorMetricsCollector
from broker.metrics.share_group_metrics import ShareGroupMetrics, ShareGroupMetricsCollector
from broker.share.acknowledgement_batch import ShareAcknowledgementBatch
from broker.share.persister import PersisterStateBatch
from broker.share.record_state import RecordState
from broker.share.share_partition import ShareAutoOffsetReset, SharePartitionConfig
from broker.share.share_partition_manager import GroupShareSettings, PartitionFetch, ShareFetchParams, SharePartitionManager
from broker.share.share_session_cache import ShareSessionCache, TopicIdPartition
from tests.unit.test_metrics_collectors import get, scrape
from tests.unit.test_share_partition_manager import EARLIEST, KEY, PARAMS, TIP, FakeLog, FakePersister, run

OTHER = TopicIdPartition(uuid.uuid4(), 0)
ACK = ShareAcknowledgementBatch


def collector(metrics: ShareGroupMetrics, manager: object = None, coordinator: object = None) -> ShareGroupMetricsCollector:
    partitions = manager if manager is not None else SimpleNamespace(share_partitions=lambda: iter(()))
    return ShareGroupMetricsCollector(metrics, partitions, ShareSessionCache(10), coordinator)  # type: ignore[arg-type]


# -- RecordAcknowledgementsPerSec ---------------------------------------------------------------------


def test_acknowledgements_count_records_by_type_as_kafkas_record_acknowledgement() -> None:
    metrics = ShareGroupMetrics()
    # One type: the batch's length. Several: one per offset. A gap (0) is no ackType of Kafka's.
    metrics.records_acknowledged([ACK(0, 4, (1,)), ACK(5, 8, (2, 3, 0, 3)), ACK(9, 9, (4,))])
    s = scrape(collector(metrics))
    name = "kafka_server_sharegroupmetrics_recordacknowledgements_total"
    assert {t: get(s, name, ackType=t) for t in ("Accept", "Release", "Reject", "Renew")} == {"Accept": 5, "Release": 1, "Reject": 2, "Renew": 1}
    assert get(s, name, ackType="Gap") is None


# -- BrokerTopicMetrics' share meters --------------------------------------------------------------------


def test_share_fetch_requests_count_once_per_topic_and_fail_per_topic_with_an_error() -> None:
    stats = BrokerTopicStats()
    metrics = ShareGroupMetrics(stats)
    a0, a1, b0 = TopicIdPartition(TIP.topic_id, 0), TopicIdPartition(TIP.topic_id, 1), OTHER
    partitions = [(a0, "a"), (a1, "a"), (b0, "b")]
    metrics.share_fetched(partitions, {a0: PartitionFetch(), a1: PartitionFetch(ErrorCode.not_leader_or_follower), b0: PartitionFetch()}, PARAMS)
    metrics.share_fetched([(b0, "b")], {b0: PartitionFetch()}, PARAMS)
    # Kafka's processShareFetch answers a request asking for no records before counting it.
    metrics.share_fetched([(b0, "b")], {}, ShareFetchParams(0, 1, 1 << 20, max_records=0))
    s = scrape(BrokerTopicMetricsCollector(stats))
    total, failed = "kafka_server_brokertopicmetrics_totalsharefetchrequests_total", "kafka_server_brokertopicmetrics_failedsharefetchrequests_total"
    assert (get(s, total, topic="a"), get(s, total, topic="b"), get(s, total)) == (1, 2, 3)
    assert (get(s, failed, topic="a"), get(s, failed)) == (1, 1)
    assert get(s, failed, topic="b") is None, "a topic shows a share meter once it moved, as Kafka makes them on first use"
    assert get(s, "kafka_server_brokertopicmetrics_failedshareacknowledgementrequests_total") == 0


def test_share_acknowledgement_requests_count_once_per_topic() -> None:
    stats = BrokerTopicStats()
    metrics = ShareGroupMetrics(stats)
    metrics.share_acknowledged({TIP: "a", TopicIdPartition(TIP.topic_id, 1): "a", OTHER: "b"}, {TIP: ErrorCode.none, OTHER: ErrorCode.invalid_record_state})
    s = scrape(BrokerTopicMetricsCollector(stats))
    total, failed = "kafka_server_brokertopicmetrics_totalshareacknowledgementrequests_total", "kafka_server_brokertopicmetrics_failedshareacknowledgementrequests_total"
    assert (get(s, total, topic="a"), get(s, total, topic="b"), get(s, total)) == (1, 1, 2)
    assert (get(s, failed, topic="a"), get(s, failed, topic="b"), get(s, failed)) == (None, 1, 1)


# -- the share partition manager's counting -------------------------------------------------------------


def test_the_manager_counts_loads_fetches_acknowledgements_and_lock_timeouts() -> None:
    log, persister = FakeLog(3, 3), FakePersister()
    short = GroupShareSettings(SharePartitionConfig(auto_offset_reset=ShareAutoOffsetReset.EARLIEST, record_lock_duration_ms=50))
    stats = BrokerTopicStats()

    async def body() -> None:
        m = SharePartitionManager(1, log, persister, lambda group_id: short, metrics=ShareGroupMetrics(stats))
        got = (await m.fetch("g", "a", [(TIP, "t")], PARAMS))[TIP]
        assert got.acquired[0].first_offset == 0 and got.acquired[0].last_offset == 5
        # Accept 0-2, reject 3; 4-5 stay acquired until their lock times out.
        assert await m.acknowledge("g", "a", {TIP: [ACK(0, 2, (1,)), ACK(3, 3, (3,))]}) == {TIP: ErrorCode.none}
        # An acknowledgement the share partition refuses counts no records.
        assert await m.acknowledge("g", "b", {TIP: [ACK(4, 4, (1,))]}) == {TIP: ErrorCode.invalid_record_state}
        for _ in range(100):
            if m.metrics.lock_timeouts.get(KEY):
                break
            await asyncio.sleep(0.02)
        s = scrape(collector(m.metrics, m))
        await m.shutdown()
        acks = "kafka_server_sharegroupmetrics_recordacknowledgements_total"
        assert (get(s, acks, ackType="Accept"), get(s, acks, ackType="Reject")) == (3, 1)
        assert get(s, "kafka_server_sharegroupmetrics_partitionloadtimems_count") == 1
        assert get(s, "kafka_server_sharegroupmetrics_requesttopicpartitionsfetchratio_count", group="g") == 1
        assert get(s, "kafka_server_sharegroupmetrics_requesttopicpartitionsfetchratio", group="g", quantile="0.5") == 100
        assert get(s, "kafka_server_sharegroupmetrics_topicpartitionsacquiretimems_count", group="g") == 1
        labels = {"group": "g", "topic": "t", "partition": "0"}
        assert get(s, "kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total", **labels) == 2
        assert get(s, "kafka_server_sharepartitionmetrics_inflightmessagecount", **labels) == 2  # 4-5, available again; 0-3 are done
        assert get(s, "kafka_server_sharepartitionmetrics_inflightbatchcount", **labels) >= 1
        assert stats.topic("t").total_share_fetch_requests == 1

    run(body)


def test_a_share_partition_no_longer_held_loses_its_series() -> None:
    log, persister = FakeLog(2), FakePersister()

    async def body() -> None:
        m = SharePartitionManager(1, log, persister, lambda group_id: EARLIEST)
        await m.fetch("g", "a", [(TIP, "t")], PARAMS)
        m.metrics.locks_expired(KEY, [PersisterStateBatch(0, 1, RecordState.AVAILABLE, 1)])
        s = scrape(collector(m.metrics, m))
        assert get(s, "kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total", group="g", topic="t", partition="0") == 2
        log.leader = False
        m.on_metadata_update(None, SimpleNamespace(topics_by_id={}))
        s = scrape(collector(m.metrics, m))
        assert get(s, "kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total", group="g", topic="t", partition="0") is None
        assert KEY not in m.metrics.lock_timeouts
        await m.shutdown()

    run(body)


def test_a_fetch_whose_partitions_cannot_load_records_no_fetch_ratio() -> None:
    log, persister = FakeLog(2), FakePersister(read_error=ErrorCode.coordinator_not_available)

    async def body() -> None:
        m = SharePartitionManager(1, log, persister, lambda group_id: EARLIEST)
        assert (await m.fetch("g", "a", [(TIP, "t")], PARAMS))[TIP].error == ErrorCode.coordinator_not_available
        assert "g" not in m.metrics.fetch_ratio and m.metrics.partition_load_time_ms.count == 0
        assert m.metrics.topic_stats.topic("t").failed_share_fetch_requests == 1
        await m.shutdown()

    run(body)


# -- group-coordinator-metrics, share part --------------------------------------------------------------


def test_share_group_counts_by_state_and_rebalances() -> None:
    clock = [0]
    metrics = ShareGroupMetrics(now_ms=lambda: clock[0])
    stable = ShareGroup("s", group_epoch=3, members={"m": ShareGroupMember("m")})
    shards = {0: SimpleNamespace(share_groups=SimpleNamespace(groups={"s": stable, "e": ShareGroup("e")})), 1: SimpleNamespace(share_groups=SimpleNamespace(groups={"e2": ShareGroup("e2")}))}
    for _ in range(3):
        metrics.share_group_rebalanced()
    clock[0] = 30_000
    s = scrape(collector(metrics, coordinator=SimpleNamespace(shards=shards)))
    name = "kafka_server_group_coordinator_metrics_share_group_count"
    assert {st: get(s, name, state=st) for st in ("Empty", "Stable", "Dead")} == {"Empty": 2, "Stable": 1, "Dead": 0}
    assert get(s, "kafka_server_group_coordinator_metrics_group_count", protocol="share") == 3
    assert get(s, "kafka_server_group_coordinator_metrics_share_group_rebalance_count") == 3
    assert get(s, "kafka_server_group_coordinator_metrics_share_group_rebalance_rate") == pytest.approx(3 / 30)


def test_share_session_cache_gauges() -> None:
    sessions = ShareSessionCache(10)
    sessions.new_context("g", "m", 0, [TIP, OTHER], [], False, "conn")
    s = scrape(ShareGroupMetricsCollector(ShareGroupMetrics(), SimpleNamespace(share_partitions=lambda: iter(())), sessions))  # type: ignore[arg-type]
    assert get(s, "kafka_server_sharesessioncache_sharesessionscount") == 1
    assert get(s, "kafka_server_sharesessioncache_sharepartitionscount") == 2


# -- share-coordinator-metrics ---------------------------------------------------------------------------


def test_share_coordinator_writes_latency_and_pruning() -> None:
    clock = [0]
    metrics = ShareCoordinatorMetrics(now_ms=lambda: clock[0])
    service = SimpleNamespace(metrics=metrics, shards={0: object(), 3: object()}, runtime=SimpleNamespace(_loading={5: None}, _epochs={0: 1, 3: 1, 5: 1, 7: 1}))
    s = scrape(ShareCoordinatorMetricsCollector(service))  # type: ignore[arg-type]
    assert get(s, "kafka_server_share_coordinator_metrics_write_total") == 0
    assert get(s, "kafka_server_share_coordinator_metrics_write_latency_avg") != get(s, "kafka_server_share_coordinator_metrics_write_latency_avg")  # NaN, as Kafka's Avg without samples

    async def body() -> None:
        for _ in range(4):
            metrics.record_write()
        assert metrics.timed("answered", 0.0) == "answered"
        pending: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        assert metrics.timed(pending, 0.0) is pending
        assert len(metrics.write_latency._samples) == 1  # noqa: SLF001 - recorded only once answered
        pending.set_result(0)
        await asyncio.sleep(0)

    run(body)
    metrics.pruned(3, 120)
    metrics.pruned(0, 7)
    metrics.resigned(0)
    clock[0] = 30_000
    s = scrape(ShareCoordinatorMetricsCollector(service))  # type: ignore[arg-type]
    prefix = "kafka_server_share_coordinator_metrics_"
    assert get(s, prefix + "write_total") == 4
    assert get(s, prefix + "write_rate") == pytest.approx(4 / 30)
    assert get(s, prefix + "write_latency_max") >= get(s, prefix + "write_latency_avg") > 0
    assert get(s, prefix + "last_pruned_offset", topic="__share_group_state", partition="3") == 120
    assert get(s, prefix + "last_pruned_offset", topic="__share_group_state", partition="0") is None
    assert {st: get(s, prefix + "num_partitions", state=st) for st in ("active", "loading", "failed")} == {"active": 2, "loading": 1, "failed": 1}

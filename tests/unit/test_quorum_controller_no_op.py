"""KIP-835 on the virtual clock: the active controller's NoOpRecord every metadata.max.idle.interval.ms,
and the KafkaController LastApplied/LastCommitted record gauges it keeps moving."""

from __future__ import annotations

import asyncio
from typing import Any

from broker.controller.controller_logic import CreatableTopic
from broker.controller.feature_control_manager import METADATA_VERSION_FEATURE
from broker.metadata.metadata_records import FeatureLevelRecord, NoOpRecord
from tests.unit.quorum_controller_fakes import Clock, FakeQuorum, Node, run, settle

IDLE_MS = 500


def cluster(*node_ids: int, **config: Any) -> tuple[FakeQuorum, dict[int, Node], Clock]:
    quorum = FakeQuorum()
    quorum.auto_commit = True
    clock = Clock()
    nodes = {n: Node(quorum, n, clock, **config) for n in node_ids}
    return quorum, nodes, clock


def no_ops(quorum: FakeQuorum) -> list[int]:
    """The offsets of the NoOpRecords written so far, committed or not."""
    return [
        batch.base_offset + i
        for batch in [*quorum.committed, *quorum.pending]
        for i, record in enumerate(batch.records)
        if isinstance(record, NoOpRecord)
    ]


def test_a_no_op_record_every_idle_interval_from_activation() -> None:
    async def scenario() -> None:
        quorum, nodes, clock = cluster(1, 2)
        quorum.elect(1)
        await settle()
        active, standby = nodes[1].controller, nodes[2].controller
        clock.now += IDLE_MS - 1
        assert not await active.maybe_write_no_op_record()
        clock.now += 1
        assert await active.maybe_write_no_op_record()
        assert not await active.maybe_write_no_op_record()  # the next is an interval away
        await settle()
        first = no_ops(quorum)
        assert len(first) == 1 and quorum.committed[-1].records == [NoOpRecord()]
        # A standby controller never writes one.
        assert not await standby.maybe_write_no_op_record()
        clock.now += IDLE_MS
        assert await active.maybe_write_no_op_record()
        await settle()
        assert len(no_ops(quorum)) == 2
        # The NoOpRecord is replayed as nothing: the image moves on in offset only.
        assert nodes[2].loader.image.provenance == no_ops(quorum)[-1]

    run(scenario())


def test_other_writes_do_not_postpone_the_no_op_record() -> None:
    """Kafka's writeNoOpRecord is a periodic task: its deadline counts from the last NoOpRecord,
    not from the last write, so a busy controller writes them too (QuorumController.registerWriteNoOpRecord)."""

    async def scenario() -> None:
        quorum, nodes, clock = cluster(1)
        quorum.elect(1)
        controller = nodes[1].controller
        await settle()
        clock.now += IDLE_MS // 2
        topic = CreatableTopic(name="busy", num_partitions=1, replication_factor=1, assignments=None, configs={})
        await controller.create_topics([topic], validate_only=False)
        clock.now += IDLE_MS // 2
        assert await controller.maybe_write_no_op_record()
        await settle()
        assert len(no_ops(quorum)) == 1

    run(scenario())


def test_an_idle_interval_of_zero_writes_none() -> None:
    async def scenario() -> None:
        quorum, nodes, clock = cluster(1, metadata_max_idle_interval_ms=0)
        quorum.elect(1)
        await settle()
        for _ in range(10):
            clock.now += 10 * IDLE_MS
            assert not await nodes[1].controller.maybe_write_no_op_record()
        assert no_ops(quorum) == []

    run(scenario())


def test_none_below_the_metadata_version_that_has_it() -> None:
    """isNoOpRecordSupported: metadata.version 3.3-IV1 (level 5) and later."""

    async def scenario() -> None:
        quorum, nodes, clock = cluster(1)
        quorum.elect(1)
        await settle()
        quorum.append(1, [FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=4)])  # 3.3-IV0
        await settle()
        assert nodes[1].loader.image.features[METADATA_VERSION_FEATURE] == 4
        controller = nodes[1].controller
        clock.now += IDLE_MS
        assert not await controller.maybe_write_no_op_record()
        quorum.append(1, [FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=5)])  # 3.3-IV1
        await settle()
        clock.now += IDLE_MS
        assert await controller.maybe_write_no_op_record()
        await settle()
        assert len(no_ops(quorum)) == 1

    run(scenario())


def test_the_timer_writes_them_on_its_own_and_stops_on_resignation() -> None:
    async def scenario() -> None:
        quorum, nodes, clock = cluster(1, 2, metadata_max_idle_interval_ms=20)
        controller = nodes[1].controller
        controller.start()
        try:
            quorum.elect(1)
            for _ in range(200):
                clock.now += 5
                await asyncio.sleep(0.005)
                if len(no_ops(quorum)) >= 3:
                    break
            assert len(no_ops(quorum)) >= 3
            quorum.elect(2)
            written = len(no_ops(quorum))
            clock.now += 1000
            await asyncio.sleep(0.05)
            assert len(no_ops(quorum)) == written
        finally:
            await controller.shutdown()

    run(scenario())


def test_last_applied_and_committed_record_gauges() -> None:
    """QuorumControllerMetrics as Kafka's OffsetControlManager sets them: the active controller's
    last applied record is the last it appended, a standby's the last committed."""

    async def scenario() -> None:
        quorum, nodes, clock = cluster(1, 2)
        quorum.auto_commit = False
        quorum.elect(1)
        active, standby = nodes[1].controller, nodes[2].controller
        quorum.commit()
        await settle()
        clock.now += IDLE_MS
        assert await active.maybe_write_no_op_record()
        offset = no_ops(quorum)[-1]
        assert active.last_applied_record_offset == offset and active.last_applied_record_timestamp == clock.now
        assert active.last_committed_record_offset < offset and standby.last_applied_record_offset < offset
        quorum.commit()
        assert active.last_committed_record_offset == standby.last_committed_record_offset == offset
        assert standby.last_applied_record_offset == offset
        assert standby.last_applied_record_timestamp == quorum.committed[-1].append_timestamp

    run(scenario())

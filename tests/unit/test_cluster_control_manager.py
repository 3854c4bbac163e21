"""ClusterControlManager: registration, heartbeats, fencing by session timeout and controlled
shutdown, on a virtual clock, with every decision committed to a replayed log."""

from __future__ import annotations

import random
import uuid

from broker.controller.cluster_control_manager import BrokerHeartbeatReply, BrokerRegistrationRequest, ClusterControlManager
from broker.controller.configuration_control_manager import ConfigurationControlManager
from broker.controller.controller_logic import cluster_bootstrap_records
from broker.controller.feature_control_manager import FeatureControlManager, FixedKRaftVersion
from broker.controller.producer_id_control_manager import ProducerIdControlManager
from broker.controller.replica_placer import StripedReplicaPlacer
from broker.controller.replication_control_manager import CreatableTopic, ReplicationControlManager
from broker.metadata.metadata_image import NO_LEADER
from broker.metadata.metadata_records import (
    BrokerEndpoint,
    BrokerRegistrationChangeRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from tests.unit.control_manager_images import Log

CLUSTER = "kbroker-test-cluster"


class Controller:
    """The managers over one log, with a virtual clock: what QuorumController will drive."""

    def __init__(self, *, kraft_version: int = 0) -> None:
        self.log = Log()
        self.log.commit(cluster_bootstrap_records())
        self.now = 0
        self.replication = ReplicationControlManager(configuration=ConfigurationControlManager(), placer=StripedReplicaPlacer(random.Random(5)))
        self.cluster = ClusterControlManager(cluster_id=CLUSTER, replication=self.replication, features=FeatureControlManager(kraft_version=FixedKRaftVersion(kraft_version)))
        self.incarnations: dict[int, uuid.UUID] = {}

    def request(self, broker: int, *, incarnation: uuid.UUID | None = None, **kw: object) -> BrokerRegistrationRequest:
        fields: dict[str, object] = {
            "broker_id": broker,
            "cluster_id": CLUSTER,
            "incarnation_id": incarnation or self.incarnations.setdefault(broker, uuid.uuid4()),
            "listeners": (BrokerEndpoint(name="PLAINTEXT", host="localhost", port=9000 + broker),),
            "features": {"metadata.version": (7, 33)},
            "rack": None,
            "log_dirs": (uuid.UUID(int=0x1000 + broker),),
        }
        fields.update(kw)
        return BrokerRegistrationRequest(**fields)  # type: ignore[arg-type]

    def register(self, broker: int, **kw: object) -> tuple[int, int]:
        result = self.cluster.register_broker(self.request(broker, **kw), image=self.log.image, controller_offset=self.log.end_offset, now_ms=self.now)
        self.log.commit(result.records)
        return result.response.error_code, result.response.broker_epoch

    def heartbeat(self, broker: int, *, offset: int | None = None, epoch: int | None = None, want_fence: bool = False, want_shut_down: bool = False) -> BrokerHeartbeatReply:
        image = self.log.image
        result = self.cluster.heartbeat(
            broker,
            image.brokers[broker].epoch if epoch is None else epoch,
            image.provenance if offset is None else offset,
            want_fence,
            want_shut_down,
            now_ms=self.now,
            image=image,
            committed_offset=image.provenance,
        )
        self.log.commit(result.records)
        self.last_records = result.records
        return result.response

    def join(self, *brokers: int) -> None:
        for b in brokers:
            assert self.register(b)[0] == 0
            assert not self.heartbeat(b).is_fenced

    def create(self, name: str, *replicas: list[int]) -> None:
        topic = CreatableTopic(name, -1, -1, dict(enumerate(replicas)), {})
        result = self.replication.create_topics(
            self.log.image, [topic], validate_only=False, default_partitions=1, default_replication_factor=1, validate_config=lambda c: None
        )
        assert [r.error_code for r in result.response] == [0]
        self.log.commit(result.records)

    def leader(self, name: str, partition: int = 0) -> int:
        return self.log.image.topics[name].partitions[partition].leader


# --- registration ------------------------------------------------------------------


def test_a_new_registration_starts_fenced_with_the_record_offset_as_epoch() -> None:
    c = Controller()
    offset = c.log.end_offset
    assert c.register(1, rack="r1") == (0, offset)
    broker = c.log.image.brokers[1]
    assert broker.fenced and broker.epoch == offset and broker.rack == "r1"
    assert {f.name: (f.min_supported_version, f.max_supported_version) for f in broker.supported_features} == {"metadata.version": (7, 33)}


def test_registration_errors() -> None:
    c = Controller()
    cases = [
        (c.request(1, cluster_id="other"), 104, f"Expected cluster ID {CLUSTER}, but got cluster ID other"),
        (c.request(1, features={"metadata.version": (7, 20)}), 35,
         "Unable to register because the broker does not support finalized version 33 of metadata.version. "
         "The broker wants a version between 7 and 20, inclusive."),
        (c.request(1, features={}), 35,
         "Unable to register because the broker does not support finalized version 33 of metadata.version. "
         "The broker wants a version between 1 and 1, inclusive."),
        (c.request(1, log_dirs=()), 119, "No directories specified in request"),
        (c.request(1, log_dirs=(uuid.UUID(int=1),)), 119, "Reserved directory ID in request"),
        (c.request(1, log_dirs=(uuid.UUID(int=0x999),) * 2), 119, "Duplicate directory ID in request"),
        (c.request(1, is_migrating_zk_broker=True), 102, "Controller does not support registering ZK brokers."),
    ]
    for request, code, message in cases:
        result = c.cluster.register_broker(request, image=c.log.image, controller_offset=c.log.end_offset, now_ms=0)
        assert (result.records, result.response.error_code, result.response.error_message) == ([], code, message)
    c.register(2)
    result = c.cluster.register_broker(c.request(1, log_dirs=(uuid.UUID(int=0x1002),)), image=c.log.image, controller_offset=9, now_ms=0)
    assert (result.response.error_code, result.response.error_message) == (119, f"Broker 2 is already registered with directory {uuid.UUID(int=0x1002)}")


def test_finalized_features_the_broker_does_not_know_refuse_it() -> None:
    c = Controller(kraft_version=1)
    code, _ = c.register(1)
    assert code == 35
    assert c.register(1, features={"metadata.version": (7, 33), "kraft.version": (0, 1)})[0] == 0
    c.log.commit([FeatureLevelRecord(name="group.version", feature_level=1)])
    result = c.cluster.register_broker(
        c.request(2, features={"metadata.version": (7, 33), "kraft.version": (0, 1)}), image=c.log.image, controller_offset=50, now_ms=0
    )
    assert result.response.error_message == (
        "Unable to register because the broker does not support finalized version 1 of group.version. "
        "The broker wants a version between 0 and 0, inclusive."
    )


def test_duplicate_registration_while_the_other_incarnation_is_alive() -> None:
    c = Controller()
    c.join(1)
    epoch = c.log.image.brokers[1].epoch
    c.now = 5_000
    other = uuid.uuid4()
    assert c.register(1, incarnation=other) == (101, -1)
    # The same incarnation amends its registration: same epoch, still unfenced.
    assert c.register(1) == (0, epoch)
    assert not c.log.image.brokers[1].fenced
    # Once its session has run out, a new incarnation replaces it with a new epoch, fenced.
    c.now = 5_000 + 9_001
    offset = c.log.end_offset
    assert c.register(1, incarnation=other) == (0, offset)
    assert c.log.image.brokers[1].fenced and c.log.image.brokers[1].incarnation_id == other


# --- heartbeats ----------------------------------------------------------------------


def test_unfenced_once_caught_up_with_the_registration_record() -> None:
    c = Controller()
    _, epoch = c.register(1)
    reply = c.heartbeat(1, offset=epoch - 1)
    assert (reply.error_code, reply.is_caught_up, reply.is_fenced, c.last_records) == (0, False, True, [])
    reply = c.heartbeat(1, offset=epoch)
    assert (reply.is_caught_up, reply.is_fenced) == (True, False)
    assert c.last_records == [UnfenceBrokerRecord(id=1, epoch=epoch)]
    assert not c.log.image.brokers[1].fenced
    reply = c.heartbeat(1)
    assert (reply.is_fenced, c.last_records) == (False, [])


def test_stale_broker_epoch() -> None:
    c = Controller()
    _, epoch = c.register(1)
    reply = c.heartbeat(1, epoch=epoch + 7)
    assert (reply.error_code, reply.error_message) == (77, f"Expected broker epoch {epoch}, but got broker epoch {epoch + 7}")
    result = c.cluster.heartbeat(2, 0, 0, False, False, now_ms=0, image=c.log.image, committed_offset=0)
    assert (result.records, result.response.error_code) == ([], 77)


def test_a_broker_may_ask_to_be_fenced_or_shut_down_at_once() -> None:
    c = Controller()
    c.join(1, 2)
    reply = c.heartbeat(1, want_fence=True)
    assert reply.is_fenced and not reply.should_shut_down and c.log.image.brokers[1].fenced
    reply = c.heartbeat(1, want_shut_down=True)
    assert reply.should_shut_down and c.last_records == []  # already fenced: nothing more to write
    reply = c.heartbeat(2, want_shut_down=True)  # leads nothing: no controlled shutdown needed
    assert reply.should_shut_down and reply.is_fenced and c.last_records == [FenceBrokerRecord(id=2, epoch=c.log.image.brokers[2].epoch)]


def test_session_timeout_fences_and_moves_leadership() -> None:
    c = Controller()
    c.join(1, 2, 3)
    c.create("t", [1, 2, 3], [3, 2, 1])
    c.create("solo", [1])
    for t in range(1_000, 12_001, 1_000):
        c.now = t
        c.heartbeat(2)
        c.heartbeat(3)
        result = c.cluster.fence_stale_brokers(c.now, c.log.image)
        c.log.commit(result.records)
        if t <= 9_000:  # 1 was last heard from at 0; the session is 9000 ms
            assert result.response == [] and c.cluster.next_session_expiry_ms(c.log.image) == 9_000
        elif t == 10_000:
            assert result.response == [1]
            assert result.records[-1] == FenceBrokerRecord(id=1, epoch=c.log.image.brokers[1].epoch)
            assert all(isinstance(r, PartitionChangeRecord) for r in result.records[:-1]) and len(result.records) == 4
        else:
            assert result.response == []
    assert c.log.image.brokers[1].fenced
    assert (c.leader("t", 0), c.log.image.topics["t"].partitions[0].isr) == (2, (2, 3))
    assert c.log.image.topics["t"].partitions[1].isr == (3, 2)
    assert (c.leader("solo"), c.log.image.topics["solo"].partitions[0].isr) == (NO_LEADER, (1,))
    # 1 comes back: unfenced once caught up, and leads its offline partition again.
    reply = c.heartbeat(1)
    assert not reply.is_fenced and c.leader("solo") == 1
    assert c.last_records[0] == UnfenceBrokerRecord(id=1, epoch=c.log.image.brokers[1].epoch)


def fence_all_stale(c: Controller, cluster: ClusterControlManager, now_ms: int) -> list[list[int]]:
    """The session timer's passes at ``now_ms`` until none fences: what each fenced, committed in turn."""
    passes = []
    while (result := cluster.fence_stale_brokers(now_ms, c.log.image)).response:
        c.log.commit(result.records)
        passes.append(result.response)
    return passes


def test_a_new_active_controller_gives_every_broker_a_fresh_session() -> None:
    c = Controller()
    c.join(1, 2)
    c.now = 60_000
    c.cluster.activate(c.log.image, c.now)
    assert c.cluster.fence_stale_brokers(c.now + 9_000, c.log.image).response == []
    # One broker per pass, as Kafka's maybeFenceOneStaleBroker: the longest silent first.
    assert fence_all_stale(c, c.cluster, c.now + 9_001) == [[1], [2]]
    # Sessions the manager never saw (another controller registered them) start at the first check.
    c = Controller()
    c.join(1, 2)
    fresh = ClusterControlManager(cluster_id=CLUSTER, replication=c.replication, features=FeatureControlManager())
    assert fresh.fence_stale_brokers(100_000, c.log.image).response == []
    assert fence_all_stale(c, fresh, 109_001) == [[1], [2]]


def test_a_heartbeat_counts_when_it_arrives_not_when_its_turn_to_be_written_comes() -> None:
    """Kafka 4.4's trackBrokerHeartbeat: queued behind slow writes (the controller failover of
    long campaign 756070550), a live broker's heartbeats must keep its session."""
    c = Controller()
    c.join(1, 2)
    c.now = 60_000
    c.cluster.activate(c.log.image, c.now)
    # Broker 1's heartbeat arrived at +8 s and is still waiting to be written at +9.001 s.
    c.cluster.track_heartbeat(1, c.log.image.brokers[1].epoch, c.now + 8_000, c.log.image)
    assert fence_all_stale(c, c.cluster, c.now + 9_001) == [[2]]
    # An old incarnation's heartbeat keeps nothing alive.
    c.cluster.track_heartbeat(1, c.log.image.brokers[1].epoch - 1, c.now + 16_000, c.log.image)
    assert fence_all_stale(c, c.cluster, c.now + 17_001) == [[1]]


def test_controlled_shutdown_moves_leadership_then_shuts_down() -> None:
    c = Controller()
    c.join(1, 2, 3)
    c.create("t", [1, 2, 3], [2, 1, 3])
    c.create("solo", [1])
    for b in (1, 2, 3):
        c.heartbeat(b)
    reply = c.heartbeat(1, want_shut_down=True)
    assert (reply.is_fenced, reply.in_controlled_shutdown, reply.should_shut_down) == (False, True, False)
    epoch = c.log.image.brokers[1].epoch
    assert c.last_records[0] == BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=epoch, in_controlled_shutdown=1)
    assert c.log.image.brokers[1].in_controlled_shutdown
    assert (c.leader("t", 0), c.leader("t", 1), c.leader("solo")) == (2, 2, NO_LEADER)
    assert c.log.image.topics["t"].partitions[1].isr == (2, 3)
    # Leadership has moved, but 2 and 3 have not reported seeing it yet.
    reply = c.heartbeat(1, want_shut_down=True)
    assert (reply.in_controlled_shutdown, reply.should_shut_down, c.last_records) == (True, False, [])
    c.heartbeat(2)
    c.heartbeat(3)
    reply = c.heartbeat(1, want_shut_down=True)
    assert (reply.is_fenced, reply.in_controlled_shutdown, reply.should_shut_down) == (True, False, True)
    assert c.last_records == [FenceBrokerRecord(id=1, epoch=epoch)]
    assert c.log.image.brokers[1].fenced
    # A broker in controlled shutdown is never elected, so 2 keeps leading after 3 fails.
    assert fence_all_stale(c, c.cluster, c.now + 9_001) == [[2], [3]]


def test_unregister_broker() -> None:
    c = Controller()
    c.join(1, 2)
    c.create("t", [1, 2])
    result = c.cluster.unregister_broker(1, c.log.image)
    assert result.response.error_code == 0
    assert result.records[-1] == UnregisterBrokerRecord(broker_id=1, broker_epoch=c.log.image.brokers[1].epoch)
    c.log.commit(result.records)
    assert 1 not in c.log.image.brokers and (c.leader("t"), c.log.image.topics["t"].partitions[0].isr) == (2, (2,))
    result = c.cluster.unregister_broker(1, c.log.image)
    assert (result.records, result.response.error_code) == ([], 102)


def test_producer_id_blocks_check_the_broker_epoch() -> None:
    c = Controller()
    _, epoch = c.register(1)
    pids = ProducerIdControlManager()
    result = pids.generate_next_producer_id(c.log.image, 1, epoch)
    assert (result.response.error_code, result.response.first_producer_id, result.response.size) == (0, 0, 1000)
    c.log.commit(result.records)
    assert pids.generate_next_producer_id(c.log.image, 1, epoch).response.first_producer_id == 1000
    stale = pids.generate_next_producer_id(c.log.image, 1, epoch - 1)
    assert (stale.records, stale.response.error_code) == ([], 77)
    assert pids.generate_next_producer_id(c.log.image, 4, 0).response.error_code == 77


def test_cluster_bootstrap_is_only_the_feature_levels() -> None:
    records = cluster_bootstrap_records(features={"group.version": 1, "transaction.version": 0, "kraft.version": 1})
    assert records == [FeatureLevelRecord(name="metadata.version", feature_level=33), FeatureLevelRecord(name="group.version", feature_level=1)]
    assert not any(isinstance(r, RegisterBrokerRecord) for r in records)

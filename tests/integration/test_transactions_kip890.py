"""KIP-890 on the wire: partition leaders verify transactions (part 1), and transaction version 2
(part 2: an epoch bump per transaction, partitions added by their leaders) as a Kafka 4 client
speaks it. Raw requests, so each field and error is seen as the client would see it."""

from __future__ import annotations

import datetime

from kio.schema.api_versions.v3 import request as api_versions_v3
from kio.schema.api_versions.v4 import request as api_versions_v4
from kio.schema.describe_producers.v0 import request as describe_producers_v0
from kio.schema.end_txn.v3 import request as end_v3
from kio.schema.end_txn.v5 import request as end_v5
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as find_v4
from kio.schema.list_offsets.v7 import request as list_offsets_v7
from kio.schema.offset_fetch.v8 import request as fetch_v8
from kio.schema.produce.v9 import request as produce_v9
from kio.schema.produce.v11 import request as produce_v11
from kio.schema.produce.v12 import request as produce_v12
from kio.schema.txn_offset_commit.v5 import request as txn_commit_v5

from protocol.api_keys import ApiKey
from protocol.records import build_batch
from tests.integration.conftest import BrokerProcess
from tests.integration.helpers import create_topic, unique_topic
from tests.integration.test_transactions_wire import add, describe, init
from tests.integration.txn_helpers import values_of
from tests.integration.wire import request

READ_COMMITTED = 1
LATEST = -1
PRODUCE = {9: produce_v9, 11: produce_v11, 12: produce_v12}


def produce(bs: str, version: int, txn: str | None, topic: str, pid: int, epoch: int, sequence: int, value: bytes, partition: int = 0) -> ErrorCode:
    """One transactional batch to ``partition``; its error code."""
    schema = PRODUCE[version]
    batch = build_batch([(None, value, (), 0)], producer_id=pid, producer_epoch=epoch, base_sequence=sequence, is_transactional=True)
    r = request(
        bs,
        schema.ProduceRequest(
            transactional_id=txn,
            acks=-1,
            timeout=datetime.timedelta(seconds=10),
            topic_data=(schema.TopicProduceData(name=topic, partition_data=(schema.PartitionProduceData(index=partition, records=batch),)),),
        ),
    )
    [code] = [p.error_code for t in r.responses for p in t.partition_responses]
    return code


def end_v5_txn(bs: str, txn: str, pid: int, epoch: int, commit: bool) -> tuple[ErrorCode, int, int]:
    r = request(bs, end_v5.EndTxnRequest(transactional_id=txn, producer_id=pid, producer_epoch=epoch, committed=commit))
    return r.error_code, r.producer_id, r.producer_epoch


def offsets(bs: str, topic: str) -> tuple[int, int]:
    """(last stable offset, log end offset) of partition 0."""
    found = []
    for isolation in (READ_COMMITTED, 0):
        r = request(
            bs,
            list_offsets_v7.ListOffsetsRequest(
                replica_id=-1,
                isolation_level=isolation,
                topics=(list_offsets_v7.ListOffsetsTopic(name=topic, partitions=(list_offsets_v7.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=LATEST),)),),
            ),
        )
        [part] = [p for t in r.topics for p in t.partitions]
        found.append(part.offset)
    return found[0], found[1]


def one_aborted_batch(bs: str, name: str) -> tuple[str, str, int, int]:
    """A new topic whose partition 0 holds one transaction, aborted: its batch of sequence 0 and
    the ABORT marker. (topic, transactional id, producer id, producer epoch)."""
    topic, txn = unique_topic(name), unique_topic(f"{name}-tx")
    create_topic(bs, topic)
    request(bs, find_v4.FindCoordinatorRequest(key_type=1, coordinator_keys=(txn,)))
    _, pid, epoch = init(bs, txn)
    assert add(bs, txn, pid, epoch, {topic: (0,)}) == {(topic, 0): ErrorCode.none}
    assert produce(bs, 9, txn, topic, pid, epoch, 0, b"aborted") == ErrorCode.none
    assert request(bs, end_v3.EndTxnRequest(transactional_id=txn, producer_id=pid, producer_epoch=epoch, committed=False)).error_code == ErrorCode.none
    assert offsets(bs, topic) == (2, 2)
    return topic, txn, pid, epoch


def producer_epoch_on(bs: str, topic: str, pid: int) -> int:
    r = request(bs, describe_producers_v0.DescribeProducersRequest(topics=(describe_producers_v0.TopicRequest(name=topic, partition_indexes=(0,)),)))
    [state] = [s for t in r.topics for p in t.partitions for s in p.active_producers if s.producer_id == pid]
    return state.producer_epoch


def test_api_versions_finalize_transaction_version_2(module_broker: BrokerProcess) -> None:
    """A new cluster finalizes transaction.version 2, as Kafka 4.0 formats one: Kafka 4 clients
    then end every transaction with EndTxn v5 and send Produce v12 or later (v13 names topics by ID)."""
    r = request(module_broker.bootstrap, api_versions_v4.ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    assert {f.name: (f.min_version, f.max_version) for f in r.supported_features}["transaction.version"] == (0, 2)
    assert {f.name: (f.min_version_level, f.max_version_level) for f in r.finalized_features}["transaction.version"] == (2, 2)
    assert r.finalized_features_epoch >= 0
    ranges = {k.api_key: k.max_version for k in r.api_keys}
    assert (ranges[ApiKey.PRODUCE], ranges[ApiKey.END_TXN], ranges[ApiKey.TXN_OFFSET_COMMIT]) == (13, 5, 6)
    # Before v4 a supported range from 0 is left out, as Kafka does for older clients.
    old = request(module_broker.bootstrap, api_versions_v3.ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    assert "transaction.version" not in {f.name for f in old.supported_features}
    assert "transaction.version" in {f.name for f in old.finalized_features}


def test_a_batch_outside_its_transaction_is_refused(module_broker: BrokerProcess) -> None:
    """Part 1: the leader asks the coordinator before a transaction's first batch; a partition the
    transaction does not hold is refused, and nothing reaches the log."""
    bs = module_broker.bootstrap
    topic, txn = unique_topic("kip890-verify"), unique_topic("kip890-vtx")
    create_topic(bs, topic)
    request(bs, find_v4.FindCoordinatorRequest(key_type=1, coordinator_keys=(txn,)))
    _, pid, epoch = init(bs, txn)
    assert produce(bs, 9, txn, topic, pid, epoch, 0, b"a") == ErrorCode.invalid_txn_state
    # Produce v11 clients know KIP-890's abortable error.
    assert produce(bs, 11, txn, topic, pid, epoch, 0, b"a") == ErrorCode.transaction_abortable
    # A transactional batch without its transactional id is refused before anything else, as not
    # authorized, authorizer or not (Kafka 4.4's KafkaApis).
    assert produce(bs, 9, None, topic, pid, epoch, 0, b"a") == ErrorCode.transactional_id_authorization_failed
    assert offsets(bs, topic) == (0, 0)
    # An epoch the coordinator does not hold: PRODUCER_FENCED, told to the producer as INVALID_PRODUCER_EPOCH.
    assert add(bs, txn, pid, epoch, {topic: (0,)}) == {(topic, 0): ErrorCode.none}
    assert produce(bs, 9, txn, topic, pid, epoch - 1 if epoch else epoch + 1, 0, b"a") == ErrorCode.invalid_producer_epoch
    assert produce(bs, 9, txn, topic, pid, epoch, 0, b"a") == ErrorCode.none
    assert produce(bs, 9, txn, topic, pid, epoch, 1, b"b") == ErrorCode.none  # the transaction is open here now: no question asked
    assert request(bs, end_v3.EndTxnRequest(transactional_id=txn, producer_id=pid, producer_epoch=epoch, committed=True)).error_code == ErrorCode.none
    assert offsets(bs, topic) == (3, 3)


def test_a_late_batch_after_an_abort_does_not_hang_the_partition(module_broker: BrokerProcess) -> None:
    """The hanging transaction KIP-890 closes: a batch that arrives after its transaction was
    aborted (a retry stuck in the network) would open a transaction no coordinator knows, and
    read_committed consumers would wait on it for ever. It is refused instead."""
    bs = module_broker.bootstrap
    topic, txn, pid, epoch = one_aborted_batch(bs, "kip890-late")
    # The late batch: same producer, same epoch, next sequence.
    assert produce(bs, 9, txn, topic, pid, epoch, 1, b"late") == ErrorCode.invalid_txn_state
    assert offsets(bs, topic) == (2, 2)  # nothing open: the last stable offset is the log end
    assert [(s.transaction_state, s.topics) for s in describe(bs, txn)] == [("CompleteAbort", ())]


def test_a_new_transaction_reusing_an_aborted_ones_sequence_is_refused(module_broker: BrokerProcess) -> None:
    """Issue 32: librdkafka gives the next transaction the sequences of records it purged on
    abort_transaction, even when the leader had appended them. Deduplicated against the aborted
    batch, the new records were acknowledged unwritten and their commit committed nothing."""
    bs = module_broker.bootstrap
    topic, txn, pid, epoch = one_aborted_batch(bs, "reused-seq")
    assert add(bs, txn, pid, epoch, {topic: (0,)}) == {(topic, 0): ErrorCode.none}
    assert produce(bs, 9, txn, topic, pid, epoch, 0, b"new") == ErrorCode.out_of_order_sequence_number
    assert offsets(bs, topic) == (2, 2)  # the aborted batch and its marker only


def test_transaction_version_2_on_the_wire(module_broker: BrokerProcess) -> None:
    """Part 2: no AddPartitionsToTxn nor AddOffsetsToTxn; each EndTxn bumps the epoch, answers it,
    and the markers carry it; a retried EndTxn names the epoch before."""
    bs = module_broker.bootstrap
    topic, txn, group = unique_topic("kip890-tv2"), unique_topic("kip890-tv2tx"), unique_topic("kip890-g")
    create_topic(bs, topic)
    request(bs, find_v4.FindCoordinatorRequest(key_type=1, coordinator_keys=(txn,)))
    request(bs, find_v4.FindCoordinatorRequest(key_type=0, coordinator_keys=(group,)))
    _, pid, epoch = init(bs, txn)

    # Produce v12 adds the partition: the leader asks the coordinator to.
    assert produce(bs, 12, txn, topic, pid, epoch, 0, b"committed") == ErrorCode.none
    [state] = describe(bs, txn)
    assert (state.transaction_state, [(t.topic, t.partitions) for t in state.topics]) == ("Ongoing", [(topic, (0,))])
    commit = request(
        bs,
        txn_commit_v5.TxnOffsetCommitRequest(
            transactional_id=txn,
            group_id=group,
            producer_id=pid,
            producer_epoch=epoch,
            topics=(txn_commit_v5.TxnOffsetCommitRequestTopic(name=topic, partitions=(txn_commit_v5.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=7, committed_metadata=""),)),),
        ),
    )
    assert [p.error_code for t in commit.topics for p in t.partitions] == [ErrorCode.none]
    assert len(describe(bs, txn)[0].topics) == 2  # the group's __consumer_offsets partition joined

    assert end_v5_txn(bs, txn, pid, epoch, commit=True) == (ErrorCode.none, pid, epoch + 1)
    assert producer_epoch_on(bs, topic, pid) == epoch + 1  # the COMMIT marker's epoch
    # A retry names the epoch it was sent with and is answered as the first was.
    assert end_v5_txn(bs, txn, pid, epoch, commit=True) == (ErrorCode.none, pid, epoch + 1)
    assert end_v5_txn(bs, txn, pid, epoch, commit=False)[0] == ErrorCode.invalid_txn_state
    # The old epoch is fenced; the next transaction runs on the new one, its sequences from 0.
    assert produce(bs, 12, txn, topic, pid, epoch, 1, b"zombie") == ErrorCode.invalid_producer_epoch
    assert produce(bs, 12, txn, topic, pid, epoch + 1, 0, b"aborted") == ErrorCode.none
    assert end_v5_txn(bs, txn, pid, epoch + 1, commit=False) == (ErrorCode.none, pid, epoch + 2)
    assert end_v5_txn(bs, txn, pid, epoch + 1, commit=False) == (ErrorCode.none, pid, epoch + 2)
    # The epoch the abort answered is no retry under version 2 but the next transaction's, empty:
    # Kafka 4.4 aborts it and bumps the epoch again, and no marker is written.
    assert end_v5_txn(bs, txn, pid, epoch + 2, commit=False) == (ErrorCode.none, pid, epoch + 3)

    assert offsets(bs, topic)[0] == offsets(bs, topic)[1] == 4
    assert values_of(bs, topic, "read_committed", 1) == ["committed"]
    fetched = request(
        bs,
        fetch_v8.OffsetFetchRequest(
            groups=(fetch_v8.OffsetFetchRequestGroup(group_id=group, topics=(fetch_v8.OffsetFetchRequestTopics(name=topic, partition_indexes=(0,)),)),),
            require_stable=True,
        ),
    )
    assert [(p.committed_offset, p.error_code) for g in fetched.groups for t in g.topics for p in t.partitions] == [(7, ErrorCode.none)]

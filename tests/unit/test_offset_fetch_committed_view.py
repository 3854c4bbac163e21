"""OffsetFetch answers from the offsets as of the last committed offset of the group's
``__consumer_offsets`` partition, as Kafka's GroupCoordinatorService.fetchOffsets /
fetchAllOffsets read the shard's timeline at the high watermark (CoordinatorRuntime's
scheduleReadOperation): a commit appended but not replicated is not shown, by any version or
form of the request, and a failover that truncates it never showed it. A stable fetch
(require_stable) waits for the partition's writes, as Kafka's write operation does.

The harness is test_group_write_failures': real logs on node 1, ``__consumer_offsets`` with a
second replica (node 2) whose fetch the test plays, min.insync.replicas 2."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Callable

from kio.schema.errors import ErrorCode
from kio.schema.offset_fetch.v1 import request as fetch_v1
from kio.schema.offset_fetch.v7 import request as fetch_v7
from kio.schema.offset_fetch.v8 import request as fetch_v8

from broker.group.coordinator_records import OffsetCommitKey, OffsetCommitValue
from broker.group.group_coordinator_shard import GroupCoordinatorShard
from broker.group.group_metadata_manager import GroupConfig
from broker.handlers.groups import OffsetFetchHandler
from broker.kafka_apis import RequestContext
from broker.network import ClientInfo
from protocol.api_keys import ApiKey
from protocol.headers import RequestHeader
from tests.unit.test_group_write_failures import DATA, GROUP, Node, answer, run, wait_for
from tests.unit.test_txn_offset_markers import marker, txn_offset_commit

# -- the core: a load holds back what it read above the high watermark ---------------------------


def _commit(shard: GroupCoordinatorShard, offset: int, record_offset: int) -> Callable[[], None]:
    return lambda: shard.replay(OffsetCommitKey(group=GROUP, topic=DATA, partition=0), OffsetCommitValue(offset=offset, leader_epoch=-1, metadata="", commit_timestamp=0, expire_timestamp=-1), record_offset)


def _fetched(shard: GroupCoordinatorShard) -> int | None:
    [(_, _, found)] = shard.offsets.fetch(GROUP, [(DATA, 0)])
    return None if found is None else found.offset


def test_a_load_shows_only_the_offsets_below_the_high_watermark_until_it_passes_the_log_end() -> None:
    shard = GroupCoordinatorShard(GroupConfig(), offset_metadata_max_bytes=4096, offsets_retention_ms=60_000)
    shard.offsets.loaded_high_watermark = 1
    shard.offsets.replay_loaded(0, _commit(shard, 5, 0))
    shard.offsets.replay_loaded(1, _commit(shard, 9, 1))
    assert _fetched(shard) == 5 and shard.offsets.has_uncommitted
    shard.offsets.update_last_committed_offset()
    assert _fetched(shard) == 9 and not shard.offsets.has_uncommitted


# -- the coordinator: OffsetFetch through its handler, every form ----------------------------------


def _ctx(version: int) -> RequestContext:
    return RequestContext(RequestHeader(int(ApiKey.OFFSET_FETCH), version, 1, "c", 0), ClientInfo("c1", "c", "127.0.0.1:5000", "PLAINTEXT"))


async def _fetch(handler: OffsetFetchHandler, version: int, body: Any) -> Any:
    response = handler(_ctx(version), body)
    return await response if asyncio.iscoroutine(response) else response


async def offsets_fetched(node: Node) -> dict[str, int]:
    """The data partition's committed offset as each form of OffsetFetch tells it (-1: none)."""
    handler = OffsetFetchHandler(node.groups, node.metadata)
    v1 = await _fetch(handler, 1, fetch_v1.OffsetFetchRequest(group_id=GROUP, topics=(fetch_v1.OffsetFetchRequestTopic(name=DATA, partition_indexes=(0,)),)))
    v7 = await _fetch(handler, 7, fetch_v7.OffsetFetchRequest(group_id=GROUP, topics=(fetch_v7.OffsetFetchRequestTopic(name=DATA, partition_indexes=(0,)),), require_stable=False))
    v7_all = await _fetch(handler, 7, fetch_v7.OffsetFetchRequest(group_id=GROUP, topics=None, require_stable=False))
    v8 = await _fetch(
        handler,
        8,
        fetch_v8.OffsetFetchRequest(
            groups=(
                fetch_v8.OffsetFetchRequestGroup(group_id=GROUP, topics=(fetch_v8.OffsetFetchRequestTopics(name=DATA, partition_indexes=(0,)),)),
                fetch_v8.OffsetFetchRequestGroup(group_id=GROUP, topics=None),
            ),
            require_stable=False,
        ),
    )
    [one, every] = v8.groups

    def offset(topics: Any) -> int:
        parts = [p for t in topics for p in t.partitions]
        assert all(p.error_code == 0 for p in parts)
        return parts[0].committed_offset if parts else -1

    return {"v1": offset(v1.topics), "v7": offset(v7.topics), "v7 all": offset(v7_all.topics), "v8": offset(one.topics), "v8 all": offset(every.topics)}


def everywhere(offset: int) -> dict[str, int]:
    return dict.fromkeys(("v1", "v7", "v7 all", "v8", "v8 all"), offset)


async def stable_fetch(node: Node) -> asyncio.Task[Any]:
    handler = OffsetFetchHandler(node.groups, node.metadata)
    body = fetch_v7.OffsetFetchRequest(group_id=GROUP, topics=(fetch_v7.OffsetFetchRequestTopic(name=DATA, partition_indexes=(0,)),), require_stable=True)
    return asyncio.ensure_future(_fetch(handler, 7, body))


def test_a_commit_is_fetched_only_once_the_high_watermark_passes_it(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        first = node.commit(5)
        node.replicate()
        assert await answer(first) == 0
        waiting = node.commit(9)
        await asyncio.sleep(0.02)
        assert isinstance(waiting, asyncio.Future) and not waiting.done()
        assert await offsets_fetched(node) == everywhere(5)
        stable = await stable_fetch(node)
        await asyncio.sleep(0.05)
        assert not stable.done(), "a stable fetch answered before the commit it follows was replicated"
        node.replicate()
        assert await answer(waiting) == 0
        assert await offsets_fetched(node) == everywhere(9)
        [topic] = (await asyncio.wait_for(stable, 5)).topics
        assert [p.committed_offset for p in topic.partitions] == [9]

    run(tmp_path, test)


def test_a_failover_that_truncates_a_commit_never_showed_it(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        first = node.commit(5)
        node.replicate()
        assert await answer(first) == 0
        end = node.partition.log.log_end_offset
        lost = node.commit(9)
        assert await offsets_fetched(node) == everywhere(5)
        # Node 2, which never fetched the commit, becomes the leader: node 1 follows and truncates.
        node.change_offsets_partition(leader=2)
        assert await answer(lost) == ErrorCode.not_coordinator
        node.partition.log.truncate_to(end)
        node.change_offsets_partition(leader=1)
        await wait_for(lambda: 0 in node.groups.shards)
        assert await offsets_fetched(node) == everywhere(5)

    run(tmp_path, test)


def test_a_new_coordinator_shows_the_commits_above_the_high_watermark_once_committed(tmp_path: Path) -> None:
    """The previous leader appended the commit and lost its leadership before the followers had
    it: the new coordinator's load reads it, as Kafka's loader does, but does not show it until
    the high watermark passes it (Kafka's lastCommittedOffset after a load is the high watermark)."""

    async def test(node: Node) -> None:
        first = node.commit(5)
        node.replicate()
        assert await answer(first) == 0
        unanswered = node.commit(9)
        node.change_offsets_partition(leader=2)
        node.change_offsets_partition(leader=1)
        assert await answer(unanswered) == ErrorCode.not_coordinator
        await wait_for(lambda: 0 in node.groups.shards)
        loaded_end = node.partition.log.log_end_offset
        assert await offsets_fetched(node) == everywhere(5)
        stable = await stable_fetch(node)
        later = node.commit(11)  # a write after the load waits for what the load read
        await asyncio.sleep(0.05)
        assert not stable.done() and isinstance(later, asyncio.Future) and not later.done()
        replicate_through(node, loaded_end)
        [topic] = (await asyncio.wait_for(stable, 5)).topics
        assert [p.committed_offset for p in topic.partitions] == [9]
        assert await offsets_fetched(node) == everywhere(9)

    run(tmp_path, test)


def replicate_through(node: Node, offset: int) -> None:
    """Node 2 fetches from ``offset``: the high watermark reaches it."""
    result = node.rm.read_for_follower(2, 1, node.partition.topic, 0, offset, -1, 0, -1, 0, node.metadata.image)
    assert result.error_code == 0 and node.partition.high_watermark == offset


def test_a_transaction_marker_above_the_high_watermark_commits_its_offsets_only_once_committed(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        first = node.commit(5)
        node.replicate()
        assert await answer(first) == 0
        offsets = txn_offset_commit(node, 8)
        node.replicate()
        assert await answer(offsets) == 0
        committing = marker(node, commit=True)
        node.change_offsets_partition(leader=2)
        node.change_offsets_partition(leader=1)
        assert await answer(committing) == ErrorCode.not_leader_or_follower
        await wait_for(lambda: 0 in node.groups.shards)
        assert await offsets_fetched(node) == everywhere(5)
        assert node.shard.offsets.has_pending_offset(GROUP, DATA, 0), "a stable fetch still answers UNSTABLE_OFFSET_COMMIT"
        node.replicate()
        await wait_for(lambda: not node.shard.offsets.has_uncommitted)
        assert await offsets_fetched(node) == everywhere(8)
        assert not node.shard.offsets.has_pending_offset(GROUP, DATA, 0)

    run(tmp_path, test)

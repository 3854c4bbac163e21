"""The console's picture of the cluster, refreshed every ``interval_s`` over Kafka's protocol.

One poll, all of it concurrent on the console's own event loop:
1. ApiVersions to every broker it knows of (and the bootstrap addresses): which answer. A
   SIGKILLed broker refuses connections at once, so the page marks it unreachable within one
   poll, seconds before the controller fences it (broker.session.timeout.ms).
2. Through one reachable broker (an unfenced one first): Metadata (topics, partition leaders,
   replicas, ISR), DescribeCluster (brokers, racks; v2's fenced brokers when the cluster serves
   v2, else "registered before, missing now" = fenced) and DescribeQuorum (forwarded by the
   broker to the active controller: leader, epoch, high watermark, each replica's log end).
3. ListOffsets (earliest, latest) to each partition leader.
4. ListGroups and ListTransactions to every reachable broker: a broker lists the groups and
   transactions it coordinates, so the one that listed them is where DescribeGroups /
   ConsumerGroupDescribe / OffsetFetch / DescribeTransactions go.
A request that fails leaves its section with an error; the rest of the picture still updates.
"""

from __future__ import annotations

import asyncio
import datetime
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Awaitable, TypeVar

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.consumer_group_describe.v0.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_protocol_assignment import v0 as cpa_v0
from kio.schema.consumer_protocol_assignment import v1 as cpa_v1
from kio.schema.consumer_protocol_assignment import v2 as cpa_v2
from kio.schema.consumer_protocol_assignment import v3 as cpa_v3
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest as DescribeClusterV1
from kio.schema.describe_cluster.v2.request import DescribeClusterRequest as DescribeClusterV2
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.describe_quorum.v2.request import DescribeQuorumRequest
from kio.schema.describe_quorum.v2.request import PartitionData as QuorumPartition
from kio.schema.describe_quorum.v2.request import TopicData as QuorumTopic
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.offset_fetch.v8.request import OffsetFetchRequest, OffsetFetchRequestGroup
from kio.schema.types import BrokerId
from kio.serial import entity_reader
from kio.static.primitive import i8, i32, i64

from broker.network_client import NetworkClient
from protocol.records import InvalidRecordError, iter_batches, iter_records, parse_control_record

T = TypeVar("T")
Address = tuple[str, int]

METADATA_TOPIC = "__cluster_metadata"
DESCRIBE_CLUSTER_KEY = 60
LATEST, EARLIEST = -1, -2
# Transaction states that are not "in flight".
SETTLED_TXN_STATES = {"Empty", "CompleteCommit", "CompleteAbort", "Dead"}
# The message browser's bounds: a page of records, a value shown up to this many bytes.
MAX_BROWSE_RECORDS = 500
MAX_SHOWN_BYTES = 4096
FETCH_BYTES = 1 << 20
_ASSIGNMENTS = (cpa_v0.ConsumerProtocolAssignment, cpa_v1.ConsumerProtocolAssignment, cpa_v2.ConsumerProtocolAssignment, cpa_v3.ConsumerProtocolAssignment)


def parse_bootstrap(text: str) -> list[Address]:
    out = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"expected HOST:PORT, got {item!r}")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("no bootstrap server")
    return out


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _ms(value: Any) -> int | None:
    if isinstance(value, datetime.datetime):
        try:
            return int(value.timestamp() * 1000)
        except (OverflowError, OSError, ValueError):
            return None
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value) if value is not None else None


def render_bytes(data: bytes | None) -> dict[str, Any] | None:
    """A key, value or header value for the page: its size, its first bytes as hex, and as text
    when they decode as UTF-8."""
    if data is None:
        return None
    shown = data[:MAX_SHOWN_BYTES]
    try:
        text: str | None = shown.decode("utf-8")
    except UnicodeDecodeError as e:
        # Cut inside a multi-byte character at the display bound: still text.
        text = shown[: e.start].decode("utf-8") if len(data) > MAX_SHOWN_BYTES and e.start >= len(shown) - 3 else None
    return {"size": len(data), "text": text, "hex": shown.hex(), "truncated": len(data) > MAX_SHOWN_BYTES}


def decode_assignment(data: bytes) -> list[tuple[str, list[int]]]:
    """A classic consumer group member's assignment bytes (ConsumerProtocolAssignment, any version)."""
    if len(data) < 2:
        return []
    (version,) = struct.unpack_from(">h", data)
    if version < 0:
        return []
    reader = entity_reader(_ASSIGNMENTS[min(version, len(_ASSIGNMENTS) - 1)])
    try:
        assignment, _ = reader(memoryview(data), 2)
    except Exception:  # an assignor of another protocol type: opaque bytes
        return []
    return [(tp.topic, sorted(int(p) for p in tp.partitions)) for tp in assignment.assigned_partitions]


@dataclass
class BrokerSeen:
    node_id: int
    host: str
    port: int
    rack: str | None

    @property
    def address(self) -> Address:
        return (self.host, self.port)


@dataclass
class Probe:
    ok: bool
    error: str | None = None
    api_versions: dict[int, tuple[int, int]] = field(default_factory=dict)
    latency_ms: float | None = None


class Collector:
    def __init__(self, bootstrap: list[Address], *, interval_s: float = 1.0, request_timeout_ms: int = 2000, history: int = 300) -> None:
        self.bootstrap = bootstrap
        self.interval_s = interval_s
        self.request_timeout_ms = request_timeout_ms
        self.probe_timeout_ms = min(1000, request_timeout_ms)
        self.client: NetworkClient | None = None
        self.known: dict[int, BrokerSeen] = {}
        self.state: dict[str, Any] = {"version": 0, "updated_ms": None, "brokers": [], "quorum": None, "topics": [], "groups": [], "transactions": [], "events": [], "errors": {}}
        self.version = 0
        self.lag_history: dict[str, deque[tuple[int, int | None]]] = {}
        self.history = history
        self.events: deque[dict[str, Any]] = deque(maxlen=100)
        self._previous: dict[str, Any] = {}
        self._updated = asyncio.Event()
        self._stopped = False

    # -- the loop ---------------------------------------------------------------------------------

    async def run(self) -> None:
        self.client = NetworkClient(
            "kbroker-console",
            request_timeout_ms=self.request_timeout_ms,
            reconnect_backoff_ms=50,
            reconnect_backoff_max_ms=500,
            connection_setup_timeout_ms=self.probe_timeout_ms,
        )
        try:
            while not self._stopped:
                started = time.monotonic()
                try:
                    await self.poll_once()
                except Exception as e:  # never let one bad poll end the console
                    self.state = {**self.state, "errors": {**self.state.get("errors", {}), "poll": _error(e)}}
                await asyncio.sleep(max(0.05, self.interval_s - (time.monotonic() - started)))
        finally:
            self.client.close()
            await self.client.wait_closed()

    def stop(self) -> None:
        self._stopped = True

    async def wait_update(self, after: int, timeout_s: float) -> None:
        """Until a poll newer than ``after`` has completed, or ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while self.version <= after:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._updated.clear()
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallowed a cancel (the console
            # stopping) that arrived as a poll completed, and the connection was served on.
            try:
                async with asyncio.timeout(left):
                    await self._updated.wait()
            except TimeoutError:
                return

    async def _send(self, address: Address, body: Any, timeout_ms: int | None = None) -> Any:
        assert self.client is not None
        return await self.client.send(address, body, timeout_ms or self.request_timeout_ms)

    @staticmethod
    async def _gather(items: dict[T, Awaitable[Any]]) -> dict[T, Any]:
        """Each awaitable's result or the exception it raised, by key."""
        keys = list(items)
        results = await asyncio.gather(*items.values(), return_exceptions=True)
        return dict(zip(keys, results))

    # -- one poll ---------------------------------------------------------------------------------

    async def poll_once(self) -> dict[str, Any]:
        started = time.monotonic()
        errors: dict[str, str] = {}
        addresses = list(dict.fromkeys([*(b.address for b in sorted(self.known.values(), key=lambda b: b.node_id)), *self.bootstrap]))
        probes: dict[Address, Probe] = await self._gather({a: self._probe(a) for a in addresses})
        for a, p in list(probes.items()):
            if isinstance(p, BaseException):
                probes[a] = Probe(False, _error(p))
        alive_before = {b["id"] for b in self.state.get("brokers", []) if not b.get("fenced")}
        by_address = {b.address: b.node_id for b in self.known.values()}
        reachable = [a for a in addresses if probes[a].ok]
        # Cluster-wide requests go through an unfenced broker that answers, the lowest id first.
        reachable.sort(key=lambda a: (by_address.get(a) not in alive_before, by_address.get(a, 1 << 31)))

        metadata = cluster = quorum = None
        via: Address | None = None
        for address in reachable:
            answers = await self._gather(
                {
                    "metadata": self._send(address, MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)),
                    "cluster": self._describe_cluster(address, probes[address]),
                    "quorum": self._send(address, DescribeQuorumRequest(topics=(QuorumTopic(topic_name=METADATA_TOPIC, partitions=(QuorumPartition(partition_index=i32(0)),)),))),
                }
            )
            if isinstance(answers["metadata"], BaseException):
                errors["metadata"] = f"{address[0]}:{address[1]}: {_error(answers['metadata'])}"
                continue
            via, metadata, cluster, quorum = address, answers["metadata"], answers["cluster"], answers["quorum"]
            errors.pop("metadata", None)
            break
        if metadata is None:
            errors.setdefault("metadata", "no broker answered: " + ", ".join(f"{a[0]}:{a[1]} {probes[a].error}" for a in addresses))
            brokers = self._brokers(None, None, probes, None)
            self._publish(started, via, brokers, self.state.get("quorum"), self.state.get("topics", []), self.state.get("groups", []), self.state.get("transactions", []), errors, stale=True)
            return self.state

        quorum_view = self._quorum(quorum, errors)
        if isinstance(cluster, BaseException):
            errors["cluster"] = _error(cluster)
            cluster = None
        self._learn(metadata, cluster)
        unprobed = [b.address for b in self.known.values() if b.address not in probes]
        if unprobed:  # brokers first heard of in this poll: look at them now, not a second later
            for a, p in (await self._gather({a: self._probe(a) for a in unprobed})).items():
                probes[a] = Probe(False, _error(p)) if isinstance(p, BaseException) else p
        brokers = self._brokers(metadata, cluster, probes, quorum_view)
        reachable_ids = {b["id"] for b in brokers if b["reachable"]}

        partitions = [
            (t.name, int(p.partition_index), int(p.leader_id))
            for t in metadata.topics
            if t.error_code == ErrorCode.none and t.name is not None
            for p in t.partitions
        ]
        offsets, groups, transactions = await asyncio.gather(
            self._offsets(partitions, reachable_ids, errors),
            self._groups(reachable_ids, errors),
            self._transactions(reachable_ids, errors),
        )
        topics = self._topics(metadata, offsets, reachable_ids)
        groups = self._group_lags(groups, offsets)
        self._publish(started, via, brokers, quorum_view, topics, groups, transactions, errors)
        return self.state

    async def _probe(self, address: Address) -> Probe:
        t0 = time.monotonic()
        try:
            response = await self._send(address, ApiVersionsRequest(client_software_name="kbroker-console", client_software_version="0.1.0"), self.probe_timeout_ms)
        except Exception as e:
            return Probe(False, _error(e))
        if response.error_code != ErrorCode.none:
            return Probe(False, response.error_code.name)
        versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}
        return Probe(True, None, versions, round((time.monotonic() - t0) * 1000, 1))

    async def _describe_cluster(self, address: Address, probe: Probe) -> Any:
        if probe.api_versions.get(DESCRIBE_CLUSTER_KEY, (0, 0))[1] >= 2:
            return await self._send(address, DescribeClusterV2(include_cluster_authorized_operations=False, include_fenced_brokers=True))
        return await self._send(address, DescribeClusterV1(include_cluster_authorized_operations=False))

    # -- sections ---------------------------------------------------------------------------------

    def _learn(self, metadata: Any, cluster: Any) -> None:
        """Every broker the cluster names, remembered: one that later goes missing is fenced."""
        if metadata is not None:
            for b in metadata.brokers:
                self.known[int(b.node_id)] = BrokerSeen(int(b.node_id), b.host, int(b.port), b.rack)
        if cluster is not None and cluster.error_code == ErrorCode.none:
            for b in cluster.brokers:
                self.known[int(b.broker_id)] = BrokerSeen(int(b.broker_id), b.host, int(b.port), b.rack)

    def _brokers(self, metadata: Any, cluster: Any, probes: dict[Address, Probe], quorum: dict[str, Any] | None) -> list[dict[str, Any]]:
        alive: set[int] = set()
        if metadata is not None:
            alive.update(int(b.node_id) for b in metadata.brokers)
        if cluster is not None and cluster.error_code == ErrorCode.none:
            for b in cluster.brokers:
                # DescribeCluster v2 (KIP-1073) lists fenced brokers too, flagged; v1 and Metadata only unfenced ones.
                if getattr(b, "is_fenced", False):
                    alive.discard(int(b.broker_id))
                else:
                    alive.add(int(b.broker_id))
        if metadata is None and cluster is None:
            # No broker answered: keep what was known, alive or not as before.
            alive = {b["id"] for b in self.state.get("brokers", []) if not b.get("fenced")}
        leader = quorum.get("leader_id") if quorum else None
        rows = []
        for node_id, seen in sorted(self.known.items()):
            probe = probes.get(seen.address)
            reachable = bool(probe and probe.ok)
            is_fenced = node_id not in alive
            status = ("online" if reachable else "unreachable") if not is_fenced else ("fenced" if reachable else "offline")
            rows.append(
                {
                    "id": node_id,
                    "host": seen.host,
                    "port": seen.port,
                    "rack": seen.rack,
                    "fenced": is_fenced,
                    "reachable": reachable,
                    "status": status,
                    "controller": node_id == leader,
                    "error": None if reachable else (probe.error if probe else "not probed"),
                    "latency_ms": probe.latency_ms if probe else None,
                }
            )
        return rows

    def _quorum(self, response: Any, errors: dict[str, str]) -> dict[str, Any] | None:
        if isinstance(response, BaseException) or response is None:
            errors["quorum"] = _error(response) if response is not None else "not asked"
            return None
        if response.error_code != ErrorCode.none:
            errors["quorum"] = f"{response.error_code.name} {response.error_message or ''}".strip()
            return None
        partition = response.topics[0].partitions[0]
        if partition.error_code != ErrorCode.none:
            errors["quorum"] = f"{partition.error_code.name} {partition.error_message or ''}".strip()
            return None
        now = _now_ms()
        leader_end = next((int(v.log_end_offset) for v in partition.current_voters if v.replica_id == partition.leader_id), None)
        endpoints = {int(n.node_id): [f"{lst.name}://{lst.host}:{lst.port}" for lst in n.listeners] for n in response.nodes}

        def replica(r: Any, role: str) -> dict[str, Any]:
            end = int(r.log_end_offset)
            last_fetch, caught_up = int(r.last_fetch_timestamp), int(r.last_caught_up_timestamp)
            return {
                "id": int(r.replica_id),
                "role": role,
                "log_end_offset": end,
                "lag": (leader_end - end) if leader_end is not None and end >= 0 else None,
                "last_fetch_ms_ago": max(now - last_fetch, 0) if last_fetch >= 0 else None,
                "last_caught_up_ms_ago": max(now - caught_up, 0) if caught_up >= 0 else None,
                "endpoints": endpoints.get(int(r.replica_id), []),
            }

        return {
            "leader_id": int(partition.leader_id),
            "leader_epoch": int(partition.leader_epoch),
            "high_watermark": int(partition.high_watermark),
            "voters": [replica(v, "leader" if v.replica_id == partition.leader_id else "follower") for v in partition.current_voters],
            "observers": [replica(o, "observer") for o in partition.observers],
        }

    async def _offsets(self, partitions: list[tuple[str, int, int]], reachable: set[int], errors: dict[str, str]) -> dict[tuple[str, int], dict[str, int]]:
        """Earliest and latest offset of every partition, asked of its leader."""
        by_leader: dict[int, dict[str, list[int]]] = {}
        for topic, partition, leader in partitions:
            if leader in reachable and leader in self.known:
                by_leader.setdefault(leader, {}).setdefault(topic, []).append(partition)
        asks = {}
        for leader, topics in by_leader.items():
            for which in (LATEST, EARLIEST):
                request = ListOffsetsRequest(
                    replica_id=BrokerId(-1),
                    isolation_level=i8(0),
                    topics=tuple(
                        ListOffsetsTopic(name=t, partitions=tuple(ListOffsetsPartition(partition_index=i32(p), current_leader_epoch=i32(-1), timestamp=i64(which)) for p in ps))
                        for t, ps in topics.items()
                    ),
                )
                asks[(leader, which)] = self._send(self.known[leader].address, request)
        out: dict[tuple[str, int], dict[str, int]] = {}
        failed = []
        for (leader, which), response in (await self._gather(asks)).items():
            if isinstance(response, BaseException):
                failed.append(f"broker {leader}: {_error(response)}")
                continue
            key = "end" if which == LATEST else "start"
            for t in response.topics:
                for p in t.partitions:
                    if p.error_code == ErrorCode.none:
                        out.setdefault((t.name, int(p.partition_index)), {})[key] = int(p.offset)
        if failed:
            errors["offsets"] = "; ".join(failed)
        return out

    async def _groups(self, reachable: set[int], errors: dict[str, str]) -> list[dict[str, Any]]:
        listed = await self._gather({b: self._send(self.known[b].address, ListGroupsRequest(states_filter=(), types_filter=())) for b in sorted(reachable)})
        by_coordinator: dict[int, list[Any]] = {}
        failed = []
        for broker_id, response in listed.items():
            if isinstance(response, BaseException) or response.error_code != ErrorCode.none:
                failed.append(f"ListGroups to broker {broker_id}: {_error(response) if isinstance(response, BaseException) else response.error_code.name}")
                continue
            by_coordinator[broker_id] = list(response.groups)
        groups: list[dict[str, Any]] = []
        for broker_id, details in (await self._gather({b: self._describe_groups(b, gs) for b, gs in by_coordinator.items() if gs})).items():
            if isinstance(details, BaseException):
                failed.append(f"groups of broker {broker_id}: {_error(details)}")
                continue
            groups.extend(details)
        if failed:
            errors["groups"] = "; ".join(failed)
        return sorted(groups, key=lambda g: g["group_id"])

    async def _describe_groups(self, coordinator: int, listed: list[Any]) -> list[dict[str, Any]]:
        address = self.known[coordinator].address
        classic = [g.group_id for g in listed if (g.group_type or "classic") != "consumer"]
        consumer = [g.group_id for g in listed if g.group_type == "consumer"]
        asks: dict[str, Awaitable[Any]] = {
            "offsets": self._send(address, OffsetFetchRequest(groups=tuple(OffsetFetchRequestGroup(group_id=g.group_id, topics=None) for g in listed), require_stable=False))
        }
        if classic:
            asks["classic"] = self._send(address, DescribeGroupsRequest(groups=tuple(classic), include_authorized_operations=False))
        if consumer:
            asks["consumer"] = self._send(address, ConsumerGroupDescribeRequest(group_ids=tuple(consumer), include_authorized_operations=False))
        answers = await self._gather(asks)
        members: dict[str, list[dict[str, Any]]] = {}
        extra: dict[str, dict[str, Any]] = {}
        if "classic" in answers and not isinstance(answers["classic"], BaseException):
            for g in answers["classic"].groups:
                extra[g.group_id] = {"protocol": g.protocol_data or None}
                members[g.group_id] = [
                    {
                        "member_id": m.member_id,
                        "instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "host": m.client_host,
                        "assignment": [[t, ps] for t, ps in decode_assignment(m.member_assignment)] if g.protocol_type == "consumer" else [],
                    }
                    for m in g.members
                ]
        if "consumer" in answers and not isinstance(answers["consumer"], BaseException):
            for g in answers["consumer"].groups:
                extra[g.group_id] = {"group_epoch": int(g.group_epoch), "assignor": g.assignor_name or None}
                members[g.group_id] = [
                    {
                        "member_id": m.member_id,
                        "instance_id": m.instance_id,
                        "client_id": m.client_id,
                        "host": m.client_host,
                        "member_epoch": int(m.member_epoch),
                        "assignment": [[tp.topic_name, sorted(int(p) for p in tp.partitions)] for tp in m.assignment.topic_partitions],
                    }
                    for m in g.members
                ]
        committed: dict[str, list[tuple[str, int, int]]] = {}
        offsets_error = None
        if isinstance(answers["offsets"], BaseException):
            offsets_error = _error(answers["offsets"])
        else:
            for g in answers["offsets"].groups:
                committed[g.group_id] = [
                    (t.name, int(p.partition_index), int(p.committed_offset)) for t in g.topics for p in t.partitions if p.error_code == ErrorCode.none and p.committed_offset >= 0
                ]
        out = []
        for g in listed:
            out.append(
                {
                    "group_id": g.group_id,
                    "type": g.group_type or "classic",
                    "protocol_type": g.protocol_type,
                    "state": g.group_state,
                    "coordinator": coordinator,
                    "members": members.get(g.group_id, []),
                    **extra.get(g.group_id, {}),
                    "_committed": committed.get(g.group_id, []),
                    "error": offsets_error,
                }
            )
        return out

    def _group_lags(self, groups: list[dict[str, Any]], offsets: dict[tuple[str, int], dict[str, int]]) -> list[dict[str, Any]]:
        now = _now_ms()
        seen = set()
        for g in groups:
            owners = {(t, p): m["client_id"] or m["member_id"] for m in g["members"] for t, ps in m["assignment"] for p in ps}
            rows = []
            total: int | None = 0
            for topic, partition, committed in sorted(g.pop("_committed")):
                end = offsets.get((topic, partition), {}).get("end")
                lag = max(end - committed, 0) if end is not None else None
                if lag is None:
                    total = None if total == 0 and not rows else total
                else:
                    total = (total or 0) + lag
                rows.append({"topic": topic, "partition": partition, "committed": committed, "end": end, "lag": lag, "owner": owners.pop((topic, partition), None)})
            for (topic, partition), owner in sorted(owners.items()):  # assigned, nothing committed yet
                end = offsets.get((topic, partition), {}).get("end")
                rows.append({"topic": topic, "partition": partition, "committed": None, "end": end, "lag": None, "owner": owner})
            g["partitions"] = rows
            g["total_lag"] = total if rows else None
            history = self.lag_history.setdefault(g["group_id"], deque(maxlen=self.history))
            history.append((now, g["total_lag"]))
            g["lag_history"] = list(history)
            seen.add(g["group_id"])
        for gone in set(self.lag_history) - seen:
            del self.lag_history[gone]
        return groups

    async def _transactions(self, reachable: set[int], errors: dict[str, str]) -> list[dict[str, Any]]:
        listed = await self._gather(
            {b: self._send(self.known[b].address, ListTransactionsRequest(state_filters=(), producer_id_filters=(), duration_filter=i64(-1))) for b in sorted(reachable)}
        )
        rows: list[dict[str, Any]] = []
        asks = {}
        failed = []
        for broker_id, response in listed.items():
            if isinstance(response, BaseException) or response.error_code != ErrorCode.none:
                failed.append(f"ListTransactions to broker {broker_id}: {_error(response) if isinstance(response, BaseException) else response.error_code.name}")
                continue
            in_flight = []
            for t in response.transaction_states:
                rows.append({"transactional_id": t.transactional_id, "producer_id": int(t.producer_id), "state": t.transaction_state, "coordinator": broker_id, "in_flight": t.transaction_state not in SETTLED_TXN_STATES})
                if t.transaction_state not in SETTLED_TXN_STATES:
                    in_flight.append(t.transactional_id)
            if in_flight:
                asks[broker_id] = self._send(self.known[broker_id].address, DescribeTransactionsRequest(transactional_ids=tuple(in_flight)))
        described: dict[str, dict[str, Any]] = {}
        now = _now_ms()
        for broker_id, response in (await self._gather(asks)).items():
            if isinstance(response, BaseException):
                failed.append(f"DescribeTransactions to broker {broker_id}: {_error(response)}")
                continue
            for t in response.transaction_states:
                if t.error_code != ErrorCode.none:
                    continue
                start = _ms(t.transaction_start_time)
                described[t.transactional_id] = {
                    "state": t.transaction_state,
                    "producer_epoch": int(t.producer_epoch),
                    "timeout_ms": _ms(t.transaction_timeout),
                    "start_ms": start if start is not None and start > 0 else None,
                    "duration_ms": now - start if start is not None and start > 0 else None,
                    "partitions": [f"{d.topic}-{int(p)}" for d in t.topics for p in d.partitions],
                }
        for row in rows:
            row.update(described.get(row["transactional_id"], {}))
        if failed:
            errors["transactions"] = "; ".join(failed)
        return sorted(rows, key=lambda r: (not r["in_flight"], r["transactional_id"]))

    def _topics(self, metadata: Any, offsets: dict[tuple[str, int], dict[str, int]], reachable: set[int]) -> list[dict[str, Any]]:
        topics = []
        for t in metadata.topics:
            if t.name is None:
                continue
            parts = []
            for p in sorted(t.partitions, key=lambda p: p.partition_index):
                replicas = [int(r) for r in p.replica_nodes]
                isr = [int(r) for r in p.isr_nodes]
                leader = int(p.leader_id)
                o = offsets.get((t.name, int(p.partition_index)), {})
                parts.append(
                    {
                        "partition": int(p.partition_index),
                        "leader": leader,
                        "leader_epoch": int(p.leader_epoch),
                        "replicas": replicas,
                        "isr": isr,
                        "offline": [int(r) for r in p.offline_replicas],
                        "under_replicated": len(isr) < len(replicas),
                        "leader_reachable": leader in reachable,
                        "error": p.error_code.name if p.error_code != ErrorCode.none else None,
                        "start_offset": o.get("start"),
                        "end_offset": o.get("end"),
                    }
                )
            topics.append(
                {
                    "name": t.name,
                    "topic_id": str(t.topic_id) if t.topic_id else None,
                    "internal": bool(t.is_internal) or t.name.startswith("__"),
                    "error": t.error_code.name if t.error_code != ErrorCode.none else None,
                    "partitions": parts,
                    "under_replicated": sum(1 for p in parts if p["under_replicated"]),
                    "offline": sum(1 for p in parts if p["leader"] < 0),
                }
            )
        return sorted(topics, key=lambda t: (t["internal"], t["name"]))

    # -- publishing -------------------------------------------------------------------------------

    def _publish(self, started: float, via: Address | None, brokers: list[dict[str, Any]], quorum: dict[str, Any] | None, topics: list[dict[str, Any]], groups: list[dict[str, Any]], transactions: list[dict[str, Any]], errors: dict[str, str], stale: bool = False) -> None:
        now = _now_ms()
        self._note_changes(now, brokers, quorum, topics)
        self.version += 1
        self.state = {
            "version": self.version,
            "updated_ms": now,
            "poll_ms": round((time.monotonic() - started) * 1000, 1),
            "interval_ms": int(self.interval_s * 1000),
            "bootstrap": [f"{h}:{p}" for h, p in self.bootstrap],
            "via": f"{via[0]}:{via[1]}" if via else None,
            "stale": stale,
            "brokers": brokers,
            "quorum": quorum,
            "topics": topics,
            "groups": groups,
            "transactions": transactions,
            "events": list(self.events),
            "errors": errors,
        }
        self._updated.set()

    def _note_changes(self, now: int, brokers: list[dict[str, Any]], quorum: dict[str, Any] | None, topics: list[dict[str, Any]]) -> None:
        """What changed since the last poll, as lines for the page's event list."""
        previous = self._previous
        status = {b["id"]: b["status"] for b in brokers}
        leaders = {(t["name"], p["partition"]): (p["leader"], tuple(p["isr"])) for t in topics for p in t["partitions"]}
        controller = quorum["leader_id"] if quorum else None
        if previous:
            for node_id, s in status.items():
                before = previous["status"].get(node_id)
                if before is None:
                    self.events.append({"ms": now, "text": f"broker {node_id} appeared ({s})"})
                elif before != s:
                    self.events.append({"ms": now, "text": f"broker {node_id}: {before} -> {s}"})
            if controller is not None and previous["controller"] is not None and controller != previous["controller"]:
                self.events.append({"ms": now, "text": f"active controller {previous['controller']} -> {controller}"})
            for (topic, partition), (leader, isr) in leaders.items():
                before = previous["leaders"].get((topic, partition))
                if before is None or topic.startswith("__"):
                    continue
                if before[0] != leader:
                    self.events.append({"ms": now, "text": f"{topic}-{partition}: leader {before[0]} -> {leader}"})
                if before[1] != isr:
                    self.events.append({"ms": now, "text": f"{topic}-{partition}: ISR {list(before[1])} -> {list(isr)}"})
        self._previous = {"status": status, "leaders": leaders, "controller": controller if controller is not None else previous.get("controller")}

    # -- the message browser ----------------------------------------------------------------------

    def _leader_of(self, topic: str, partition: int) -> int | None:
        for t in self.state.get("topics", []):
            if t["name"] == topic:
                for p in t["partitions"]:
                    if p["partition"] == partition:
                        return p["leader"] if p["leader"] in self.known else None
                raise LookupError(f"topic {topic} has no partition {partition}")
        raise LookupError(f"no topic {topic}")

    async def browse(self, topic: str, partition: int, offset: int | None, limit: int, read_committed: bool = False) -> dict[str, Any]:
        """Up to ``limit`` records of a partition from ``offset`` (default: the last ``limit``),
        fetched from its leader as a consumer fetches them."""
        limit = max(1, min(limit, MAX_BROWSE_RECORDS))
        leader = self._leader_of(topic, partition)
        if leader is None:
            raise LookupError(f"{topic}-{partition} has no leader right now")
        address = self.known[leader].address
        isolation = 1 if read_committed else 0
        ends = {}
        for which in (EARLIEST, LATEST):
            response = await self._send(
                address,
                ListOffsetsRequest(
                    replica_id=BrokerId(-1),
                    isolation_level=i8(isolation),
                    topics=(ListOffsetsTopic(name=topic, partitions=(ListOffsetsPartition(partition_index=i32(partition), current_leader_epoch=i32(-1), timestamp=i64(which)),)),),
                ),
            )
            p = response.topics[0].partitions[0]
            if p.error_code != ErrorCode.none:
                raise LookupError(f"ListOffsets {topic}-{partition} on broker {leader}: {p.error_code.name}")
            ends[which] = int(p.offset)
        start, end = ends[EARLIEST], ends[LATEST]
        position = max(start, end - limit) if offset is None else max(offset, start)
        records: list[dict[str, Any]] = []
        high_watermark = None
        while len(records) < limit and position < end:
            response = await self._send(
                address,
                FetchRequest(
                    cluster_id=None,
                    replica_id=BrokerId(-1),
                    max_wait=datetime.timedelta(0),
                    min_bytes=i32(0),
                    max_bytes=i32(FETCH_BYTES),
                    isolation_level=i8(isolation),
                    session_id=i32(0),
                    session_epoch=i32(-1),
                    topics=(FetchTopic(topic=topic, partitions=(FetchPartition(partition=i32(partition), current_leader_epoch=i32(-1), fetch_offset=i64(position), last_fetched_epoch=i32(-1), log_start_offset=i64(-1), partition_max_bytes=i32(FETCH_BYTES)),)),),
                    forgotten_topics_data=(),
                    rack_id="",
                ),
            )
            if response.error_code != ErrorCode.none:
                raise LookupError(f"Fetch {topic}-{partition} on broker {leader}: {response.error_code.name}")
            p = response.responses[0].partitions[0]
            if p.error_code != ErrorCode.none:
                raise LookupError(f"Fetch {topic}-{partition} on broker {leader}: {p.error_code.name}")
            high_watermark = int(p.high_watermark)
            next_position = position
            for header, batch in iter_batches(p.records or b""):
                if header.next_offset <= position:
                    continue
                next_position = max(next_position, header.next_offset)
                try:
                    batch_records = list(iter_records(batch, header))
                except (InvalidRecordError, Exception) as e:  # CompressionError and the like: show it, go on
                    records.append({"offset": header.base_offset, "error": f"batch {header.base_offset}-{header.last_offset}: {_error(e)}"})
                    continue
                for r in batch_records:
                    if r.offset < position or len(records) >= limit:
                        continue
                    if header.is_control:
                        try:
                            marker, _ = parse_control_record(r)
                            control = marker.name
                        except InvalidRecordError:
                            control = "CONTROL"
                        records.append({"offset": r.offset, "timestamp": r.timestamp, "control": control, "producer_id": header.producer_id})
                        continue
                    records.append(
                        {
                            "offset": r.offset,
                            "timestamp": r.timestamp,
                            "key": render_bytes(r.key),
                            "value": render_bytes(r.value),
                            "headers": [[k, render_bytes(v)] for k, v in r.headers],
                            "transactional": header.is_transactional,
                        }
                    )
                if len(records) >= limit:
                    break
            if next_position == position:
                break  # nothing more below the high watermark (or the last stable offset)
            position = next_position
        return {
            "topic": topic,
            "partition": partition,
            "leader": leader,
            "start_offset": start,
            "end_offset": end,
            "high_watermark": high_watermark,
            "from_offset": max(offset, start) if offset is not None else max(start, end - limit),
            "isolation": "read_committed" if read_committed else "read_uncommitted",
            "records": records,
        }


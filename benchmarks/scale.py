"""Workload 6, scale: one node with 10,000 partitions (1,000 topics x 10 by default).

    python -m benchmarks.scale [--broker kbroker|tansu] [--bootstrap HOST:PORT]
                               [--topics 1000] [--partitions 10] [--batch 100]
                               [--idle-seconds 30] [--idle-before-seconds 10] [--metadata-runs 5]

1. Create the topics with the AdminClient, --batch topics per CreateTopics call; wait until a
   full Metadata lists them all with leaders. Reported: creation time.
2. Loaded, before any restart: full Metadata (all topics) timed from a client, median of
   --metadata-runs: with confluent-kafka (AdminClient.list_topics(), librdkafka parses it) and
   over a raw socket (request out, whole response frame in; the client-side decode is not
   timed). RSS, and idle CPU over --idle-before-seconds.
3. Restart: SIGTERM, wait for exit, start again on the same data dir (BrokerUnderTest.restart
   does stop() + start(); here stop() and start() are called apart so the clock starts just
   before the new process is spawned). Reported: time until the port accepts, until a Metadata
   request is answered, and until that answer lists every topic again.
4. After start-up: idle CPU % over --idle-seconds (one core = 100 %), RSS, peak RSS, and the
   full Metadata time again.

File descriptors: a kbroker partition holds one fd (its active .log; indexes are read and
written with short-lived fds). The benchmark first tries to raise the limit
(benchmarks.latency.ensure_fd_limit: prlimit on the broker, and its own limit so a restarted
broker inherits it; --fd-limit 0 leaves it); if the next batch would still pass the limit, it
restarts the broker before creating it (the creation row counts those restarts; with one fd per
partition, 10,000 partitions fit this machine's hard limit of 20,000). Rows report the open fds.

Tansu runs with in-memory storage: a restart loses every topic, so its "start-up after restart"
is the start-up of an empty broker and the after-restart figures describe an empty node; the
loaded figures (step 2) are the comparable ones. The rows say so.
"""

from __future__ import annotations

import io
import os
import socket
import statistics
import struct
import time
import uuid
from typing import TYPE_CHECKING

from kio.schema.metadata.v9.request import MetadataRequest
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_reader, entity_writer

from benchmarks.latency import ensure_fd_limit, fd_limit, standalone
from protocol.api_keys import response_schema

if TYPE_CHECKING:
    from benchmarks.harness import BrokerUnderTest

WORKLOAD = "scale"


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def raw_metadata(bootstrap: str, timeout: float = 30.0) -> tuple[float, int, int]:
    """One full Metadata v9 request on a fresh connection: (seconds request->whole response,
    response bytes, topics listed). The connect is not timed; decoding happens after the clock."""
    out = io.BytesIO()
    entity_writer(RequestHeader)(out, RequestHeader(request_api_key=3, request_api_version=9, correlation_id=7, client_id="scale-bench"))
    entity_writer(MetadataRequest)(out, MetadataRequest(topics=None, allow_auto_topic_creation=False, include_cluster_authorized_operations=False, include_topic_authorized_operations=False))
    payload = out.getvalue()
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        t0 = time.perf_counter()
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", _recv_exact(sock, 4))
        frame = _recv_exact(sock, size)
        elapsed = time.perf_counter() - t0
    response, _ = entity_reader(response_schema(3, 9))(memoryview(frame).toreadonly(), 5)  # corr id + tagged fields
    return elapsed, size + 4, len(response.topics)


def client_metadata(admin, timeout: float = 60.0) -> tuple[float, int, int]:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    md = admin.list_topics(timeout=timeout)
    elapsed = time.perf_counter() - t0
    topics = [t for t in md.topics.values() if not t.topic.startswith("__")]
    return elapsed, len(topics), sum(len(t.partitions) for t in topics)


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def create_topics(broker, prefix: str, topics: int, partitions: int, batch: int, fds_per_new_partition: int) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    """Create the topics, ``batch`` per CreateTopics request; (seconds until a full Metadata
    lists them all with leaders, restarts made on the way). When the next batch would take the
    broker past its fd limit (``fds_per_new_partition`` each), restart it first: see the module
    docstring."""
    from confluent_kafka.admin import AdminClient, NewTopic

    def client() -> AdminClient:
        return AdminClient({"bootstrap.servers": broker.bootstrap, "socket.timeout.ms": 120000})

    admin = client()
    restarts = 0
    t0 = time.perf_counter()
    names = [f"{prefix}-{i:05d}" for i in range(topics)]
    for start in range(0, topics, batch):
        chunk = names[start : start + batch]
        if broker.pid and fds_per_new_partition:
            soft, _ = fd_limit(broker.pid)
            if soft >= 0 and open_fds(broker.pid) + len(chunk) * partitions * fds_per_new_partition + 512 > soft:
                del admin
                saved, broker.startup_timeout = broker.startup_timeout, 600.0
                try:
                    broker.restart()
                finally:
                    broker.startup_timeout = saved
                restarts += 1
                admin = client()
        futures = admin.create_topics([NewTopic(n, partitions, 1) for n in chunk], operation_timeout=120, request_timeout=180)
        for fut in futures.values():
            fut.result(300)
    # Created is not yet served: wait until a full Metadata lists every partition with a leader.
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=60)
        ours = [md.topics[n] for n in names if n in md.topics]
        if len(ours) == topics and all(t.error is None and len(t.partitions) == partitions and all(p.leader >= 0 for p in t.partitions.values()) for t in ours):
            return time.perf_counter() - t0, restarts
        time.sleep(0.5)
    raise RuntimeError("topics not all served 300 s after creation")


def idle_cpu_pct(broker, seconds: float) -> float:  # type: ignore[no-untyped-def]
    c0, t0 = broker.cpu_seconds(), time.perf_counter()
    time.sleep(seconds)
    return (broker.cpu_seconds() - c0) / (time.perf_counter() - t0) * 100


def metadata_rows(broker, admin, runs: int, phase: str, extra: dict) -> list[dict]:  # type: ignore[no-untyped-def]
    rows = []
    raw = [raw_metadata(broker.bootstrap) for _ in range(runs)]
    cli = [client_metadata(admin) for _ in range(runs)]
    rows.append({"workload": WORKLOAD, "metric": f"{phase}: full Metadata, raw socket (median of {runs})", "value": statistics.median(r[0] for r in raw) * 1e3, "unit": "ms", "response_bytes": raw[0][1], "topics_listed": raw[0][2], **extra})
    rows.append({"workload": WORKLOAD, "metric": f"{phase}: full Metadata, confluent list_topics (median of {runs})", "value": statistics.median(c[0] for c in cli) * 1e3, "unit": "ms", "topics_listed": cli[0][1], "partitions_listed": cli[0][2], **extra})
    return rows


def run(
    broker: BrokerUnderTest,
    runs: int = 1,
    topics: int = 1000,
    partitions: int = 10,
    batch: int = 100,
    idle_seconds: float = 30.0,
    idle_before_seconds: float = 10.0,
    metadata_runs: int = 5,
    fd_limit_to: int = -1,
    fds_per_new_partition: int = 1,
) -> list[dict]:
    from confluent_kafka.admin import AdminClient

    factor = getattr(broker, "scale", 1.0)  # the harness's --scale
    if factor != 1.0:
        topics = max(10, int(topics * factor))
        idle_seconds = max(5.0, idle_seconds * factor)
        idle_before_seconds = max(3.0, idle_before_seconds * factor) if idle_before_seconds > 0 else 0.0
    extra = {"topics": topics, "partitions_per_topic": partitions, "storage": getattr(broker, "storage", "?")}
    mruns = max(metadata_runs, runs)
    fd_need = fd_limit_to if fd_limit_to >= 0 else max(65536, 4 * topics * partitions + 4096)
    rows: list[dict] = []
    prefix = f"scale-{uuid.uuid4().hex[:6]}"
    if broker.pid:
        # kbroker keeps 3 fds per partition (.log, .index, .timeindex): 10,000 partitions need
        # > 30,000, over this machine's default 20,000 (see the module docstring).
        before = fd_limit(broker.pid)
        action = ensure_fd_limit(broker, fd_need) if fd_need > 0 else "not raised (--fd-limit 0)"
        rows.append({"workload": WORKLOAD, "metric": "broker fd soft limit (before)", "value": float(before[0]), "unit": "fds", "hard": before[1], "action": action, **extra})
    disk = getattr(broker, "storage", "disk") == "disk"
    created, restarts = create_topics(broker, prefix, topics, partitions, batch, fds_per_new_partition if disk else 0)
    rows.append({"workload": WORKLOAD, "metric": f"create {topics * partitions} partitions ({batch} topics per request)", "value": created, "unit": "s", "restarts_to_stay_under_fd_limit": restarts, **extra})
    if broker.pid:
        rows.append({"workload": WORKLOAD, "metric": "loaded: broker open fds", "value": float(open_fds(broker.pid)), "unit": "fds", "fd_limit": fd_limit(broker.pid)[0], **extra})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    rows += metadata_rows(broker, admin, mruns, "loaded", extra)
    if broker.pid:
        rows.append({"workload": WORKLOAD, "metric": "loaded: RSS", "value": broker.rss_bytes() / 2**20, "unit": "MiB", **extra})
        if idle_before_seconds > 0:
            rows.append({"workload": WORKLOAD, "metric": f"loaded: idle CPU over {idle_before_seconds:g} s (before restart)", "value": idle_cpu_pct(broker, idle_before_seconds), "unit": "%", **extra})
    if not broker.pid:
        return rows  # an external broker: no restart

    # -- restart on the same data dir ------------------------------------------------------------
    memory = getattr(broker, "storage", "disk") == "memory"
    del admin  # no librdkafka client reconnecting (and logging) across the restart
    note = {"note": "in-memory storage: the restart lost every topic; this is an empty node"} if memory else {}
    broker.stop()
    saved_timeout = broker.startup_timeout
    broker.startup_timeout = 600.0
    t0 = time.perf_counter()
    try:
        broker.start()
    finally:
        broker.startup_timeout = saved_timeout
    accepts = time.perf_counter() - t0
    answered = listed = None
    deadline = time.perf_counter() + 600
    while time.perf_counter() < deadline:
        try:
            _, _, n = raw_metadata(broker.bootstrap, timeout=60)
        except (OSError, ConnectionError, ValueError):
            time.sleep(0.05)
            continue
        now = time.perf_counter() - t0
        if answered is None:
            answered = now
        if n >= topics or memory:
            listed = now
            break
        time.sleep(0.05)
    rows.append({"workload": WORKLOAD, "metric": "restart: start-up until the port accepts", "value": accepts, "unit": "s", **extra, **note})
    rows.append({"workload": WORKLOAD, "metric": "restart: start-up until Metadata is answered", "value": float("nan") if answered is None else answered, "unit": "s", **extra, **note})
    if not memory:
        rows.append({"workload": WORKLOAD, "metric": "restart: start-up until Metadata lists every topic", "value": float("nan") if listed is None else listed, "unit": "s", **extra})
    if not memory:
        rows.append({"workload": WORKLOAD, "metric": "restart: broker open fds after start-up", "value": float(open_fds(broker.pid)), "unit": "fds", **extra})
    rows.append({"workload": WORKLOAD, "metric": "restart: RSS right after start-up", "value": broker.rss_bytes() / 2**20, "unit": "MiB", **extra, **note})
    rows.append({"workload": WORKLOAD, "metric": f"after restart: idle CPU over {idle_seconds:g} s", "value": idle_cpu_pct(broker, idle_seconds), "unit": "%", **extra, **note})
    rows.append({"workload": WORKLOAD, "metric": "after restart: RSS", "value": broker.rss_bytes() / 2**20, "unit": "MiB", **extra, **note})
    rows.append({"workload": WORKLOAD, "metric": "after restart: peak RSS (VmHWM)", "value": broker.peak_rss_bytes() / 2**20, "unit": "MiB", **extra, **note})
    if not memory:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        rows += metadata_rows(broker, admin, mruns, "after restart", extra)
    return rows


def _args(parser) -> None:  # type: ignore[no-untyped-def]
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--idle-seconds", dest="idle_seconds", type=float, default=30.0)
    parser.add_argument("--idle-before-seconds", dest="idle_before_seconds", type=float, default=10.0)
    parser.add_argument("--metadata-runs", dest="metadata_runs", type=int, default=5)
    parser.add_argument("--fds-per-new-partition", dest="fds_per_new_partition", type=int, default=1, help="kbroker: fds a newly created partition holds; 0: never restart during creation")
    parser.add_argument("--fd-limit", dest="fd_limit_to", type=int, default=-1, help="RLIMIT_NOFILE to give the broker (default: max(65536, 4 x partitions + 4096); 0: leave it)")


if __name__ == "__main__":
    standalone(__doc__.splitlines()[0], run, _args)

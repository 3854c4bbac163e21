"""Workload 7, many connections: 1,000 concurrent connections, each producing a little.

    python -m benchmarks.connections [--broker kbroker|tansu] [--bootstrap HOST:PORT]
                                     [--connections 1000] [--seconds 15] [--interval 0.5]
                                     [--records 10] [--size 100] [--partitions 10]

1,000 librdkafka producers would swamp the 2 cores, so the connections come from one asyncio
(uvloop) client: each connection sends ProduceRequest v9 (acks=all, one uncompressed v2 batch
of --records records of --size bytes, built once with protocol.records.build_batch and the kio
ProduceRequest entity; only the correlation id changes) to partition (connection % --partitions)
every --interval seconds (--interval 0: closed loop, next request as soon as the answer is in),
with a random start phase. Every answer is checked (correlation id, partition, error code).

A probe (a separate process, a confluent-kafka producer with linger.ms=0, acks=all) sends one
record every 20 ms to its own topic, before the storm (baseline) and during it; its delivery
latency says whether the broker stays responsive to a client that is not part of the storm.

File descriptors: the broker's limit is read from /proc/PID/limits and, when its soft limit is
below connections + 1024, raised on the running process with prlimit(2); the client raises its
own (benchmarks.latency.ensure_fd_limit). The rows say what was found and done.

All latencies are measured by Python clients on the same 2 cores as the broker, so they include
client scheduling delay; the probe baseline shows the floor.
"""

from __future__ import annotations

import asyncio
import io
import multiprocessing as mp
import os
import random
import struct
import time
import uuid
from typing import TYPE_CHECKING

from kio.schema.produce.v9.request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_writer

from benchmarks.latency import (
    create_topic,
    ensure_fd_limit,
    fd_limit,
    percentile,
    standalone,
)
from protocol.records import build_batch

if TYPE_CHECKING:
    from benchmarks.harness import BrokerUnderTest

WORKLOAD = "connections"
CORRELATION_AT = 8  # frame: size(4) api_key(2) api_version(2) correlation_id(4)


def produce_frame(topic: str, partition: int, records: int, size: int) -> bytes:
    now_ms = int(time.time() * 1000)
    batch = build_batch([(None, os.urandom(size), (), now_ms) for _ in range(records)])
    out = io.BytesIO()
    entity_writer(RequestHeader)(out, RequestHeader(request_api_key=0, request_api_version=9, correlation_id=0, client_id="conn-bench"))
    request = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=__import__("datetime").timedelta(seconds=30),
        topic_data=(TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=partition, records=batch),)),),
    )
    entity_writer(ProduceRequest)(out, request)
    payload = out.getvalue()
    return struct.pack(">i", len(payload)) + payload


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def check_produce_response(frame: bytes, correlation_id: int, partition: int) -> int:
    """ProduceResponse v9 with one topic and one partition: its error code (-1000: malformed)."""
    (corr,) = struct.unpack_from(">i", frame)
    if corr != correlation_id:
        return -1000
    pos = 5  # correlation id + empty tagged fields of response header v1
    n_topics, pos = _uvarint(frame, pos)
    if n_topics != 2:
        return -1000
    name_len, pos = _uvarint(frame, pos)
    pos += name_len - 1
    n_parts, pos = _uvarint(frame, pos)
    index, error = struct.unpack_from(">ih", frame, pos)
    if n_parts != 2 or index != partition:
        return -1000
    return error


class Storm:
    def __init__(self, host: str, port: int, frames: list[bytes], connections: int, seconds: float, interval: float) -> None:
        self.host, self.port = host, port
        self.frames = frames
        self.connections = connections
        self.seconds = seconds
        self.interval = interval
        self.latencies: list[float] = []
        self.sent_at: list[float] = []  # perf_counter at send, parallel to latencies
        self.connect_errors: list[str] = []
        self.request_errors: dict[str, int] = {}
        self.requests = 0
        self.open = 0

    def error(self, kind: str) -> None:
        self.request_errors[kind] = self.request_errors.get(kind, 0) + 1

    async def one(self, i: int, connected: asyncio.Semaphore, go: asyncio.Event, stop_at: list[float]) -> None:
        partitions = len(self.frames)
        partition = i % partitions
        template = self.frames[partition]
        try:
            async with connected:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), 30)
        except Exception as e:  # noqa: BLE001
            self.connect_errors.append(f"{type(e).__name__}: {e}")
            return
        self.open += 1
        try:
            await go.wait()
            loop = asyncio.get_running_loop()
            if self.interval > 0:
                await asyncio.sleep(random.random() * self.interval)
            next_at = loop.time()
            corr = i * 1_000_000
            while loop.time() < stop_at[0]:
                corr += 1
                frame = bytearray(template)
                struct.pack_into(">i", frame, CORRELATION_AT, corr)
                t0 = time.perf_counter()
                writer.write(frame)
                try:
                    size_bytes = await asyncio.wait_for(reader.readexactly(4), 30)
                    (size,) = struct.unpack(">i", size_bytes)
                    body = await asyncio.wait_for(reader.readexactly(size), 30)
                except TimeoutError:
                    self.error("timeout (30 s)")
                    return
                except (asyncio.IncompleteReadError, ConnectionError) as e:
                    self.error(f"connection lost: {type(e).__name__}")
                    return
                self.latencies.append(time.perf_counter() - t0)
                self.sent_at.append(t0)
                self.requests += 1
                code = check_produce_response(body, corr, partition)
                if code:
                    self.error(f"error code {code}")
                if self.interval > 0:
                    next_at += self.interval
                    delay = next_at - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
        finally:
            writer.close()

    async def main(self, opened: mp.synchronize.Event | None = None) -> dict:  # type: ignore[name-defined]
        connected = asyncio.Semaphore(100)
        go = asyncio.Event()
        stop_at = [float("inf")]
        t0 = time.perf_counter()
        tasks = [asyncio.create_task(self.one(i, connected, go, stop_at)) for i in range(self.connections)]
        while self.open + len(self.connect_errors) < self.connections:
            await asyncio.sleep(0.01)
        connect_s = time.perf_counter() - t0
        stop_at[0] = asyncio.get_running_loop().time() + self.seconds
        storm_t0 = time.time()
        go.set()
        await asyncio.gather(*tasks)
        return {"connect_s": connect_s, "storm_start": storm_t0, "storm_end": time.time()}


def _probe(bootstrap: str, topic: str, stop, out) -> None:  # type: ignore[no-untyped-def]
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all", "enable.idempotence": False})
    samples: list[tuple[float, float]] = []
    errors = [0]

    def on_delivery(err, msg):  # type: ignore[no-untyped-def]
        if err is not None:
            errors[0] += 1
        else:
            samples.append((time.time(), msg.latency()))

    producer.list_topics(topic, timeout=10)
    while not stop.is_set():
        producer.produce(topic, b"probe", partition=0, on_delivery=on_delivery)
        end = time.monotonic() + 0.02
        while time.monotonic() < end:
            producer.poll(max(0.0, end - time.monotonic()))
    producer.flush(30)
    out.put({"samples": samples, "errors": errors[0]})


def run(
    broker: BrokerUnderTest,
    runs: int = 1,
    connections: int = 1000,
    seconds: float = 15.0,
    interval: float = 0.5,
    records: int = 10,
    size: int = 100,
    partitions: int = 10,
) -> list[dict]:
    factor = getattr(broker, "scale", 1.0)  # the harness's --scale: shorter, still 1,000 connections
    if factor != 1.0:
        seconds = max(5.0, seconds * factor)
    extra = {"connections": connections, "interval_s": interval, "records_per_request": records, "record_bytes": size}
    rows: list[dict] = []
    if broker.pid:
        before = fd_limit(broker.pid)
        action = ensure_fd_limit(broker, connections + 1024)
        rows.append({"workload": WORKLOAD, "metric": "broker fd soft limit (before)", "value": float(before[0]), "unit": "fds", "hard": before[1], "action": action, **extra})
    else:
        ensure_fd_limit(broker, connections + 1024)  # this client's own limit

    for run_index in range(runs):
        topic = f"conns-{uuid.uuid4().hex[:8]}"
        probe_topic = f"probe-{uuid.uuid4().hex[:8]}"
        create_topic(broker.bootstrap, topic, partitions)
        create_topic(broker.bootstrap, probe_topic, 1)
        frames = [produce_frame(topic, p, records, size) for p in range(partitions)]
        ctx = mp.get_context("spawn")
        stop, out = ctx.Event(), ctx.Queue()
        probe = ctx.Process(target=_probe, args=(broker.bootstrap, probe_topic, stop, out))
        probe.start()
        time.sleep(4.0)  # baseline for the probe (its first ~1 s is connecting)
        host, port = broker.bootstrap.rsplit(":", 1)
        storm = Storm(host, int(port), frames, connections, seconds, interval)
        cpu0 = broker.cpu_seconds() if broker.pid else 0.0
        own0 = os.times()
        fds_peak = [0]
        rss_peak = [0]

        async def with_sampler() -> dict:
            async def sample() -> None:
                while True:
                    if broker.pid:
                        try:
                            fds_peak[0] = max(fds_peak[0], len(os.listdir(f"/proc/{broker.pid}/fd")))  # noqa: B023
                            rss_peak[0] = max(rss_peak[0], broker.rss_bytes())  # noqa: B023
                        except OSError:
                            pass
                    await asyncio.sleep(1.0)

            sampler = asyncio.create_task(sample())
            try:
                return await storm.main()  # noqa: B023
            finally:
                sampler.cancel()

        try:
            import uvloop

            result = uvloop.run(with_sampler())
        except ImportError:
            result = asyncio.run(with_sampler())
        busy = result["storm_end"] - result["storm_start"]
        own1 = os.times()
        client_cpu = (own1.user + own1.system - own0.user - own0.system) / (busy + result["connect_s"]) * 100
        cpu = (broker.cpu_seconds() - cpu0) / (busy + result["connect_s"]) * 100 if broker.pid else None
        time.sleep(1.0)
        stop.set()
        probe_result = out.get(timeout=60)
        probe.join(30)
        alive = broker.running() if hasattr(broker, "running") else True

        lat = sorted(storm.latencies)
        base = sorted(lat_s for t, lat_s in probe_result["samples"] if t < result["storm_start"] - 0.5)
        during = sorted(lat_s for t, lat_s in probe_result["samples"] if result["storm_start"] <= t <= result["storm_end"])
        errors = len(storm.connect_errors) + sum(storm.request_errors.values()) + probe_result["errors"]
        r = {"run": run_index, **extra}
        rows += [
            {"workload": WORKLOAD, "metric": "connections open at once", "value": float(storm.open), "unit": "conns", **r},
            {"workload": WORKLOAD, "metric": "time to open all connections", "value": result["connect_s"], "unit": "s", **r},
            {"workload": WORKLOAD, "metric": "errors (connect, request, probe)", "value": float(errors), "unit": "count", "connect_errors": storm.connect_errors[:3], "request_errors": storm.request_errors, **r},
            {"workload": WORKLOAD, "metric": "produce requests answered", "value": float(storm.requests), "unit": "req", **r},
            {"workload": WORKLOAD, "metric": "produce rate (all connections)", "value": storm.requests / busy, "unit": "req/s", "records_per_s": storm.requests * records / busy, **r},
            {"workload": WORKLOAD, "metric": "storm produce latency p50", "value": percentile(lat, 50) * 1e3, "unit": "ms", **r},
            {"workload": WORKLOAD, "metric": "storm produce latency p99", "value": percentile(lat, 99) * 1e3, "unit": "ms", **r},
            {"workload": WORKLOAD, "metric": "storm produce latency p99.9", "value": percentile(lat, 99.9) * 1e3, "unit": "ms", **r},
            {"workload": WORKLOAD, "metric": "storm produce latency max", "value": (lat[-1] if lat else float("nan")) * 1e3, "unit": "ms", **r},
            {"workload": WORKLOAD, "metric": "storm client CPU (the asyncio process)", "value": client_cpu, "unit": "%", **r},
            {"workload": WORKLOAD, "metric": "probe produce latency p50, before the storm", "value": percentile(base, 50) * 1e3, "unit": "ms", "samples": len(base), **r},
            {"workload": WORKLOAD, "metric": "probe produce latency p99, before the storm", "value": percentile(base, 99) * 1e3, "unit": "ms", "samples": len(base), **r},
            {"workload": WORKLOAD, "metric": "probe produce latency p50, during the storm", "value": percentile(during, 50) * 1e3, "unit": "ms", "samples": len(during), **r},
            {"workload": WORKLOAD, "metric": "probe produce latency p99, during the storm", "value": percentile(during, 99) * 1e3, "unit": "ms", "samples": len(during), **r},
            {"workload": WORKLOAD, "metric": "probe produce latency max, during the storm", "value": (during[-1] if during else float("nan")) * 1e3, "unit": "ms", **r},
        ]
        if broker.pid:
            rows += [
                {"workload": WORKLOAD, "metric": "broker CPU (connect + storm)", "value": cpu, "unit": "%", **r},
                {"workload": WORKLOAD, "metric": "broker open fds (peak sampled)", "value": float(fds_peak[0]), "unit": "fds", **r},
                {"workload": WORKLOAD, "metric": "broker RSS (peak sampled)", "value": rss_peak[0] / 2**20, "unit": "MiB", **r},
                {"workload": WORKLOAD, "metric": "broker still running afterwards", "value": float(alive), "unit": "bool", **r},
            ]
    return rows


def _args(parser) -> None:  # type: ignore[no-untyped-def]
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between one connection's requests (0: closed loop)")
    parser.add_argument("--records", type=int, default=10)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=10)


if __name__ == "__main__":
    standalone(__doc__.splitlines()[0], run, _args)

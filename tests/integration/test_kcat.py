"""kcat (librdkafka's command-line client, as a subprocess) against a real broker.

kcat cannot create topics: single-partition topics are auto-created by its first produce;
others are created with confluent-kafka's AdminClient.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import zlib
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import BrokerProcess
from tests.integration.helpers import BIG_TOPIC_CONFIG, CODECS, ONE_MB, create_topic

KCAT_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def kcat() -> str:
    path = shutil.which("kcat") or shutil.which("kafkacat")
    if path is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("kcat is not installed; `make test` installs it")
        pytest.skip("kcat is not installed (run `make test` or apt-get install kcat)")
    return path


def run_kcat(kcat: str, *args: str, stdin: bytes | None = None) -> bytes:
    proc = subprocess.run([kcat, *args], input=stdin, capture_output=True, timeout=KCAT_TIMEOUT_S)
    assert proc.returncode == 0, f"kcat {' '.join(args)} exited {proc.returncode}: {proc.stderr.decode(errors='replace')}"
    return proc.stdout


def consume_json(kcat: str, bootstrap: str, topic: str, *extra: str) -> list[dict[str, Any]]:
    out = run_kcat(kcat, "-b", bootstrap, "-C", "-t", topic, "-e", "-J", *extra)
    return [json.loads(line) for line in out.decode().splitlines() if line.strip()]


def query_offset(kcat: str, bootstrap: str, topic: str, partition: int, timestamp: int) -> int:
    # One partition per query: kcat folds repeated -t entries for the same partition together.
    out = run_kcat(kcat, "-b", bootstrap, "-Q", "-t", f"{topic}:{partition}:{timestamp}").decode()
    return int(out.split("offset")[-1].split()[0])


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_keys_nulls_headers_timestamps(module_broker: BrokerProcess, kcat: str, topic_name: str, codec: str) -> None:
    b = module_broker.bootstrap
    # With -Z an empty key or value is sent as null.
    keys = [f"k{i}" if i % 3 else "" for i in range(100)]
    values = [f"v{i}" if i % 5 else "" for i in range(100)]
    before = int(time.time() * 1000)
    for lo, hi in ((0, 50), (50, 100)):
        lines = "".join(f"{keys[i]}|{values[i]}\n" for i in range(lo, hi)).encode()
        run_kcat(kcat, "-b", b, "-P", "-t", topic_name, "-p", "0", "-K", "|", "-Z", "-z", codec, "-H", "src=kcat", "-H", f"codec={codec}", stdin=lines)
        time.sleep(0.05)  # the second half gets strictly later CreateTimes
    after = int(time.time() * 1000)

    got = consume_json(kcat, b, topic_name, "-o", "beginning")
    assert [m["offset"] for m in got] == list(range(100))
    for i, m in enumerate(got):
        assert m["partition"] == 0
        assert m["key"] == (keys[i] or None) and m["payload"] == (values[i] or None)
        assert m["headers"] == ["src", "kcat", "codec", codec]
        assert m["tstype"] == "create" and before <= m["ts"] <= after

    second_half = got[50]["ts"]
    assert got[49]["ts"] < second_half
    assert query_offset(kcat, b, topic_name, 0, second_half) == 50
    assert query_offset(kcat, b, topic_name, 0, after + 60_000) == -1
    assert query_offset(kcat, b, topic_name, 0, -2) == 0  # earliest
    assert query_offset(kcat, b, topic_name, 0, -1) == 100  # latest
    from_time = consume_json(kcat, b, topic_name, "-o", f"s@{second_half}")
    assert [m["offset"] for m in from_time] == list(range(50, 100))


def test_seek_and_replay(module_broker: BrokerProcess, kcat: str, topic_name: str) -> None:
    b = module_broker.bootstrap
    run_kcat(kcat, "-b", b, "-P", "-t", topic_name, "-p", "0", stdin="".join(f"m{i}\n" for i in range(100)).encode())
    middle = consume_json(kcat, b, topic_name, "-o", "37")
    assert [(m["offset"], m["payload"]) for m in middle] == [(i, f"m{i}") for i in range(37, 100)]
    window = consume_json(kcat, b, topic_name, "-o", "37", "-c", "5")
    assert [m["offset"] for m in window] == list(range(37, 42))
    tail = consume_json(kcat, b, topic_name, "-o", "-10")
    assert [m["offset"] for m in tail] == list(range(90, 100))


def test_one_megabyte_record(module_broker: BrokerProcess, kcat: str, topic_name: str, tmp_path: Path) -> None:
    b = module_broker.bootstrap
    create_topic(b, topic_name, configs=BIG_TOPIC_CONFIG)
    big = os.urandom(ONE_MB // 2).hex().encode()
    assert len(big) == ONE_MB
    payload = tmp_path / "big.bin"
    payload.write_bytes(big)
    run_kcat(kcat, "-b", b, "-P", "-t", topic_name, "-p", "0", "-X", "message.max.bytes=2000000", str(payload))
    run_kcat(kcat, "-b", b, "-P", "-t", topic_name, "-p", "0", stdin=b"after\n")
    out = run_kcat(kcat, "-b", b, "-C", "-t", topic_name, "-p", "0", "-o", "0", "-c", "1", "-f", "%S %s")
    assert out == f"{ONE_MB} ".encode() + big
    rest = consume_json(kcat, b, topic_name, "-p", "0", "-o", "1")
    assert [(m["offset"], m["payload"]) for m in rest] == [(1, "after")]


def test_hundred_partitions_with_keyed_partitioner(module_broker: BrokerProcess, kcat: str, topic_name: str) -> None:
    b = module_broker.bootstrap
    create_topic(b, topic_name, 100)
    meta = run_kcat(kcat, "-b", b, "-L", "-t", topic_name).decode()
    assert f'topic "{topic_name}" with 100 partitions' in meta

    # librdkafka's default partitioner (consistent_random) puts a keyed record on crc32(key) % n;
    # pick keys until every partition gets three.
    keys: list[str] = []
    per_partition = {p: 0 for p in range(100)}
    for i in range(100_000):
        p = zlib.crc32(f"key{i}".encode()) % 100
        if per_partition[p] < 3:
            per_partition[p] += 1
            keys.append(f"key{i}")
        if len(keys) == 300:
            break
    run_kcat(kcat, "-b", b, "-P", "-t", topic_name, "-K", ":", "-X", "linger.ms=20", stdin="".join(f"{k}:value-of-{k}\n" for k in keys).encode())

    got = consume_json(kcat, b, topic_name, "-o", "beginning")
    assert len(got) == 300
    by_partition: dict[int, list[dict[str, Any]]] = {}
    for m in got:
        assert m["payload"] == f"value-of-{m['key']}"
        assert m["partition"] == zlib.crc32(m["key"].encode()) % 100
        by_partition.setdefault(m["partition"], []).append(m)
    assert sorted(by_partition) == list(range(100))
    for p, msgs in by_partition.items():
        assert [m["offset"] for m in msgs] == [0, 1, 2]
        order = [k for k in keys if zlib.crc32(k.encode()) % 100 == p]
        assert [m["key"] for m in msgs] == order

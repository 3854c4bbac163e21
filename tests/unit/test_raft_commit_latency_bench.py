"""The Raft commit latency benchmark, kept working: a short run of its core and of its command line."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import uvloop

from benchmarks.raft_commit_latency import CommitLatencyResult, main, run_benchmark

RUN_LIMIT_S = 20.0


def short_run(root: Path, linger_ms: int) -> CommitLatencyResult:
    return uvloop.run(asyncio.wait_for(run_benchmark(root, records=50, rate=500.0, linger_ms=linger_ms), RUN_LIMIT_S))


def test_every_append_is_timed_to_its_commit(tmp_path: Path) -> None:
    result = short_run(tmp_path, linger_ms=25)
    assert result.records == 50 and len(result.latencies_ms) == 50
    assert 1 <= result.batches <= 50
    assert 0 < result.p50_ms <= result.p99_ms <= result.max_ms == max(result.latencies_ms)
    assert result.throughput > 0 and result.linger_ms == 25


def test_no_linger_still_commits_everything(tmp_path: Path) -> None:
    result = short_run(tmp_path, linger_ms=0)
    assert len(result.latencies_ms) == 50 and result.linger_ms == 0


def test_command_line_writes_the_json_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # The command configures structlog for the process; here that would point every later test's
    # logging at this test's captured (then closed) stderr.
    monkeypatch.setattr("benchmarks.raft_commit_latency.setup_logging", lambda level=None: None)
    out = tmp_path / "out.json"
    assert main(["--records", "20", "--rate", "1000", "--linger-ms", "5", "--json", str(out)]) == 0
    summary = json.loads(out.read_text())
    assert summary["records"] == 20 and summary["linger_ms"] == 5 and len(summary["latencies_ms"]) == 20
    assert "p99" in capsys.readouterr().out

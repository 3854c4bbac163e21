"""Start-up recovery of a segment after an unclean shutdown, in process: CPU per batch.

    python -m benchmarks.segment_recovery [--batches 100000] [--trials 5]

Writes ``--batches`` one-record batches (the chaos bench's queue: each acks=all send its own
batch) into one segment, then times ``LogSegment.recover``, which re-validates every batch (size,
CRC32C, offsets) and rebuilds both indexes, as a node killed with -9 does for each active segment.
Prints the median over ``--trials`` of the process CPU time per batch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from protocol.records import build_batch
from storage.log_config import LogConfig
from storage.log_segment import LogSegment

TIMESTAMP = 1_700_000_000_000


def one_trial(batches: int) -> float:
    """µs of CPU per batch recovered."""
    data = b"".join(build_batch([(None, b"v%08d" % i, (), TIMESTAMP + i)], base_offset=i) for i in range(batches))
    with tempfile.TemporaryDirectory() as tmp:
        segment = LogSegment.open(Path(tmp), 0, LogConfig(), TIMESTAMP)
        os.pwrite(segment.fd, data, 0)
        segment.size = len(data)
        start = time.process_time()
        truncated = segment.recover()
        elapsed = time.process_time() - start
        segment.close()
    assert truncated == 0
    return elapsed / batches * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=100_000)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    per_batch = statistics.median(one_trial(args.batches) for _ in range(args.trials))
    print(f"LogSegment.recover {per_batch:5.2f} µs CPU per one-record batch ({args.batches} batches)")


if __name__ == "__main__":
    main()

"""The log's hot paths in process, without a network or a client: CPU per append and per read.

    python -m benchmarks.log_append [--batches 20000] [--trials 5]

Appends ``--batches`` batches of 100 records of 100 B (workload 1's batches at linger.ms=5)
with ``UnifiedLog.append_as_leader``, plain and idempotent, then reads the whole log back in
1 MiB ``read`` calls (file regions, as a fetch answers them). Prints the median over
``--trials`` of the process CPU time per append and per read: the figure to compare before
and after a change to storage/, steadier than records/s on a loaded machine.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from pathlib import Path

import structlog

from protocol.records import build_batch
from storage.log_config import LogConfig
from storage.unified_log import UnifiedLog

RECORDS_PER_BATCH = 100
VALUE = b"v" * 100
TIMESTAMP = 1_700_000_000_000


def one_trial(batches: int, idempotent: bool) -> tuple[float, float]:
    """(µs of CPU per append, µs of CPU per 1 MiB read)."""
    records = [(None, VALUE, (), TIMESTAMP)] * RECORDS_PER_BATCH
    built = [
        bytearray(build_batch(records, producer_id=7, producer_epoch=0, base_sequence=i * RECORDS_PER_BATCH) if idempotent else build_batch(records))
        for i in range(batches)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        plog = UnifiedLog.open(Path(tmp) / "bench-0", LogConfig(), topic_id=None, recovery_point=0, log_start_offset=0, had_clean_shutdown=True)
        start = time.process_time()
        for batch in built:
            plog.append_as_leader(memoryview(batch), 0)
        append_us = (time.process_time() - start) / batches * 1e6
        end, offset, reads = plog.log_end_offset, 0, 0
        start = time.process_time()
        while offset < end:
            info = plog.read(offset, 1 << 20, end, True)
            offset += sum(region.length for region in info.regions) // len(built[0]) * RECORDS_PER_BATCH
            reads += 1
        read_us = (time.process_time() - start) / reads * 1e6
        plog.close()
    return append_us, read_us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=20_000)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    for idempotent in (False, True):
        trials = [one_trial(args.batches, idempotent) for _ in range(args.trials)]
        append_us = statistics.median(t[0] for t in trials)
        read_us = statistics.median(t[1] for t in trials)
        mode = "idempotent" if idempotent else "plain     "
        print(f"{mode}  append_as_leader {append_us:6.2f} µs CPU per {RECORDS_PER_BATCH}-record batch   read {read_us:6.2f} µs CPU per 1 MiB call")


if __name__ == "__main__":
    main()

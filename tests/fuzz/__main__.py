"""`make fuzz`: the long run. ``python -m tests.fuzz --frames 1000000 [--seed S] [--in-process]``

By default the frames go to a broker process started for the run (each one is also decoded
in-process first); ``--in-process`` runs the decoders alone, much faster. Prints the counts per
outcome and exits non-zero on any crash, traceback or unhealthy broker.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

from tests.fuzz.healthy import Unhealthy
from tests.fuzz.inprocess import run_in_process
from tests.fuzz.session import fuzz_broker


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz")
    parser.add_argument("--frames", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=None, help="default: a random one, printed")
    parser.add_argument("--hours", type=float, default=12.0, help="stop after this long whatever the count")
    parser.add_argument("--in-process", action="store_true", help="the decoders only, no broker")
    parser.add_argument("--dir", type=Path, default=None, help="where the broker's data and log go (default: a temporary directory)")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    print(f"fuzz: seed {seed} (FUZZ_SEED={seed} replays it), {args.frames} frames", flush=True)
    deadline_s = args.hours * 3600
    if args.in_process:
        started = time.monotonic()
        result = run_in_process(seed, args.frames, deadline_s)
        print(result.report(f"in-process, seed {seed}", time.monotonic() - started))
        return 1 if result.failures else 0
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="kbroker-fuzz-"))
    print(f"fuzz: broker data and log under {workdir}", flush=True)
    try:
        result, seconds = fuzz_broker(workdir, seed, args.frames, deadline_s, progress_every=10_000)
    except (AssertionError, Unhealthy) as e:
        print(f"fuzz: FAILED (seed {seed}): {e}")
        return 1
    print(result.report(f"network, seed {seed}", seconds))
    return 1 if result.failures or result.tracebacks else 0


if __name__ == "__main__":
    sys.exit(main())

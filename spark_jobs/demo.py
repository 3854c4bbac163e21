"""`make spark-demo`: a throwaway broker, the three example jobs against it, then everything stopped.

    python -m spark_jobs.demo [--events 10000]

The broker (benchmarks.harness.BrokerUnderTest) listens on a free loopback port with its data
in a temporary folder, removed at the end with the jobs' checkpoints and Parquet files.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.harness import BrokerUnderTest

JOB_TIMEOUT_S = 600.0
REPO = Path(__file__).resolve().parents[1]


def run_job(name: str, *args: str) -> None:
    print(f"\n===== python -m spark_jobs.{name} {' '.join(args)}", flush=True)
    subprocess.run([sys.executable, "-m", f"spark_jobs.{name}", *args], check=True, timeout=JOB_TIMEOUT_S, cwd=REPO)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=10_000)
    args = p.parse_args(argv)
    with BrokerUnderTest("kbroker") as broker, tempfile.TemporaryDirectory(prefix="kbroker-spark-demo-") as output:
        print(f"kbroker on {broker.bootstrap} (pid {broker.pid})", flush=True)
        run_job("produce_events", "--bootstrap", broker.bootstrap, "--events", str(args.events))
        run_job("stream_counts", "--bootstrap", broker.bootstrap, "--output", output)
        run_job("consume_report", "--bootstrap", broker.bootstrap, "--topic", "user_click_counts", "--show", "10")
    print("\nspark-demo: done, broker stopped", flush=True)


if __name__ == "__main__":
    main()

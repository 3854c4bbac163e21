"""Many short chaos campaigns on fresh random seeds, one line each and a total.

    python -m tests.chaos.soak --runs 30 --faults 6 --out DIR [--target kbroker|kafka] [campaign options]

Each run is ``python -m tests.chaos.campaign`` in a process of its own, with a seed drawn from the
system's randomness (so a soak never replays an earlier one) and its output in ``DIR/<seed>``.
A run that passes keeps its verdicts, history and timeline but not its cluster's data and logs; a
run that fails keeps everything, and its line gives the command that replays it. The last line
counts the runs that passed and failed, and the exit code is 1 if any failed.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# A run that has not ended by then is stopped (SIGTERM first: the campaign still heals and checks).
RUN_TIMEOUT_S = 3600.0
STOP_GRACE_S = 300.0


@dataclass(frozen=True)
class RunOutcome:
    seed: int
    exit_code: int
    elapsed_s: float
    verdicts: dict[str, Any] | None  # verdicts.json, None when the run wrote none

    @property
    def failures(self) -> list[str]:
        """``workload/check:count`` for every check that found anomalies, plus stalls, crashes and
        client failures; a run without verdicts is a failure of its own."""
        if self.verdicts is None:
            return ["no verdicts"]
        found = [f"{v['workload']}/{v['check']}:{v['count']}" for v in self.verdicts.get("verdicts", []) if v["count"]]
        if self.verdicts.get("stalls"):
            found.append(f"stalls:{self.verdicts['stalls']}")
        found += [f"client:{failure}" for failure in self.verdicts.get("client_failures", [])]
        return found

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and not self.failures

    def line(self, replay: str) -> str:
        windows = len(self.verdicts.get("windows", [])) if self.verdicts else 0
        head = f"seed {self.seed}: {windows} windows, {self.elapsed_s:.0f} s"
        if self.passed:
            return f"{head}, ok"
        return f"{head}, FAILED (exit {self.exit_code}) {' '.join(self.failures)}; replay: {replay}"


def summary(outcomes: list[RunOutcome]) -> str:
    """The plain closing line: '<n> passed, <m> failed'."""
    passed = sum(1 for o in outcomes if o.passed)
    return f"soak: {passed} passed, {len(outcomes) - passed} failed"


def run_one(seed: int, out: Path, campaign_args: list[str]) -> RunOutcome:
    command = [sys.executable, "-m", "tests.chaos.campaign", "--seed", str(seed), "--out", str(out), *campaign_args]
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(out / "campaign.log", "wb") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            exit_code = process.wait(RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.terminate()
            try:
                exit_code = process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                exit_code = process.wait()
    verdicts_file = out / "verdicts.json"
    verdicts = json.loads(verdicts_file.read_text()) if verdicts_file.exists() else None
    return RunOutcome(seed, exit_code, time.monotonic() - started, verdicts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("chaos-soak"))
    args, campaign_args = parser.parse_known_args()
    draw = random.SystemRandom()
    outcomes: list[RunOutcome] = []
    for _ in range(args.runs):
        seed = draw.randrange(2**31)
        out = (args.out / str(seed)).resolve()
        outcome = run_one(seed, out, campaign_args)
        outcomes.append(outcome)
        if outcome.passed:
            shutil.rmtree(out / "cluster", ignore_errors=True)
        replay = " ".join(["python -m tests.chaos.campaign", "--seed", str(seed), *campaign_args])
        print(outcome.line(replay), flush=True)
    print(summary(outcomes), flush=True)
    raise SystemExit(0 if all(o.passed for o in outcomes) else 1)


if __name__ == "__main__":
    main()

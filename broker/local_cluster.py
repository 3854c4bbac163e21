"""`make cluster`: three combined KRaft nodes on 127.0.0.1, for trying a cluster on one machine.

Client ports 9092-9094, controller ports 19092-19094, data and server.properties under
./cluster/node<N>/. Every node's output is printed with a `[node N]` prefix; Ctrl-C (or
SIGTERM) stops them all with SIGTERM, which is a graceful shutdown. Storage is formatted once
with one cluster id; a later run reuses it. `kbroker console` runs beside them (--console-port,
8080 by default, 0 for none), its output prefixed `[console]`.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

STOP_TIMEOUT_S = 30.0


def node_properties(node_id: int, count: int, root: Path, base_port: int, controller_base_port: int) -> str:
    voters = ",".join(f"{i}@127.0.0.1:{controller_base_port + i - 1}" for i in range(1, count + 1))
    client_port = base_port + node_id - 1
    controller_port = controller_base_port + node_id - 1
    lines = {
        "node.id": node_id,
        "process.roles": "broker,controller",
        "listeners": f"PLAINTEXT://127.0.0.1:{client_port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{client_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.quorum.voters": voters,
        "log.dirs": str(root / f"node{node_id}" / "data"),
        "offsets.topic.replication.factor": min(3, count),
        "transaction.state.log.replication.factor": min(3, count),
        "transaction.state.log.min.isr": min(2, count),
    }
    return "".join(f"{k}={v}\n" for k, v in lines.items())


def _pump(prefix: str, stream: IO[bytes]) -> None:
    for line in iter(stream.readline, b""):
        sys.stdout.write(f"{prefix} {line.decode(errors='replace')}")
        sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make cluster", description=__doc__)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--dir", default="cluster")
    parser.add_argument("--port", type=int, default=9092, help="the first client port")
    parser.add_argument("--controller-port", type=int, default=19092, help="the first controller port")
    parser.add_argument("--console-port", type=int, default=8080, help="the port of `kbroker console` (0: no console)")
    args = parser.parse_args(argv)
    root = Path(args.dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    kbroker = [sys.executable, "-m", "broker"]
    cluster_id_file = root / "cluster.id"
    if not cluster_id_file.exists():
        cluster_id = subprocess.run([*kbroker, "storage", "random-uuid"], check=True, capture_output=True, text=True).stdout.strip()
        cluster_id_file.write_text(cluster_id + "\n")
    cluster_id = cluster_id_file.read_text().strip()
    configs = []
    for node_id in range(1, args.nodes + 1):
        config = root / f"node{node_id}" / "server.properties"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(node_properties(node_id, args.nodes, root, args.port, args.controller_port))
        subprocess.run([*kbroker, "storage", "format", "--cluster-id", cluster_id, "--config", str(config), "--ignore-formatted"], check=True, capture_output=True)
        configs.append(config)
    bootstrap = ",".join(f"127.0.0.1:{args.port + i}" for i in range(args.nodes))
    print(f"cluster {cluster_id}: bootstrap servers {bootstrap}", flush=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    procs = []
    for node_id, config in enumerate(configs, start=1):
        proc = subprocess.Popen([*kbroker, "serve", "--config", str(config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        threading.Thread(target=_pump, args=(f"[node {node_id}]", proc.stdout), daemon=True).start()
        procs.append(proc)
    console = None
    if args.console_port:
        # A client of the cluster like any other: it waits for the nodes by itself. Not one of
        # `procs`, so a console that cannot bind its port does not stop the cluster.
        console = subprocess.Popen([*kbroker, "console", "--bootstrap-server", bootstrap, "--port", str(args.console_port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        threading.Thread(target=_pump, args=("[console]", console.stdout), daemon=True).start()
        print(f"console: http://127.0.0.1:{args.console_port}/", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.is_set() and all(p.poll() is None for p in procs):
        stop.wait(0.5)
    for p in [*procs, *([console] if console else [])]:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    code = 0
    for p in procs:
        try:
            code = max(code, p.wait(STOP_TIMEOUT_S))
        except subprocess.TimeoutExpired:
            p.kill()
            code = 1
    if console is not None:
        try:
            console.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            console.kill()
    return code


if __name__ == "__main__":
    raise SystemExit(main())

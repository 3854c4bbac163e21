"""KafkaRaftServer: one node's start-up and shutdown, its parts chosen by process.roles.

Kafka's KafkaRaftServer. The shared part (storage checks, the network client, the metadata
quorum and loader) runs on every node; a controller adds the QuorumController and its
listeners, a broker the data plane and the client listeners. Start-up order matters: the
controller listeners are open before the Raft manager starts, so that the other voters can
reach this one while it elects; the broker's publishers are installed before the log is
replayed; the broker opens its client listeners last, once unfenced.

Shutdown mirrors it: a broker first asks the controller to move its leaderships away
(controlled shutdown), then closes every client connection at once, as Kafka's
stopProcessingRequests does (answers still awaited, such as an acks=all produce, are dropped),
then flushes and checkpoints its logs; a leader of the quorum resigns so that another voter takes
over without waiting out an election timeout.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import structlog

from broker.broker_server import BrokerServer
from broker.config import BrokerConfig
from broker.controller_server import ControllerServer
from broker.log_dir_failure_handler import LogDirFailureHandler
from broker.network import TransferMetrics
from broker.shared_server import SharedServer

log = structlog.get_logger(__name__)

CONTROLLED_SHUTDOWN_TIMEOUT_S = 30.0
RAFT_RESIGN_TIMEOUT_MS = 5000


class KafkaRaftServer:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.metrics = TransferMetrics()
        self.shared = SharedServer(config)
        self.controller: ControllerServer | None = None
        self.broker: BrokerServer | None = None
        self._stopping = asyncio.Event()

    async def startup(self) -> None:
        cfg = self.config
        started = time.monotonic()
        failure_handler = LogDirFailureHandler(
            self.shared.log_dir_failure_channel, asyncio.get_running_loop(), log_dirs=cfg.log_dir_paths, metadata_dir=cfg.metadata_dir
        )
        # Before the directories are locked: one that cannot be goes offline.
        failure_handler.install()
        self.shared.check_storage()
        self.shared.start_raft()
        if cfg.is_controller:
            self.controller = ControllerServer(self.shared, self.metrics)
            await self.controller.start_listeners()
        if cfg.is_broker:
            local = self.controller.apis if self.controller is not None else None
            self.broker = BrokerServer(self.shared, self.metrics, local)
            failure_handler.on_offline = self._handle_log_dir_failure
        self.shared.start()
        if self.controller is not None:
            self.controller.start()
            log.info("controller.started", node_id=cfg.node_id, cluster_id=self.shared.cluster_id, startup_s=round(time.monotonic() - started, 3))
        if self.broker is not None:
            await self.broker.start(started)

    def _handle_log_dir_failure(self, log_dir: Path) -> None:
        assert self.broker is not None
        self.broker.handle_log_dir_failure(log_dir)
        self.shared.release_dir_lock(log_dir)

    def request_stop(self) -> None:
        self._stopping.set()

    async def wait_for_stop(self) -> None:
        await self._stopping.wait()

    async def shutdown(self) -> None:
        log.info("node.stopping", node_id=self.config.node_id)
        if self.broker is not None:
            await self.broker.controlled_shutdown(CONTROLLED_SHUTDOWN_TIMEOUT_S)
            await self.broker.stop_listeners()
            await self.broker.shutdown()
        # Before the controller listeners close: a resigning leader is done once it sees the next
        # leader, which it learns from that leader's BeginQuorumEpoch. With the listeners closed
        # first, every shutdown of the active controller waited out the whole timeout.
        await self.shared.resign(RAFT_RESIGN_TIMEOUT_MS)
        if self.controller is not None:
            await self.controller.stop_listeners()
            await self.controller.shutdown()
        await self.shared.shutdown()
        log.info("broker.stopped", node_id=self.config.node_id)


async def serve(config: BrokerConfig) -> None:
    server = KafkaRaftServer(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.request_stop)
    startup = asyncio.create_task(server.startup())
    stop = asyncio.create_task(server.wait_for_stop())
    await asyncio.wait([startup, stop], return_when=asyncio.FIRST_COMPLETED)
    if not startup.done():
        # Stopped while still waiting (for a quorum, or to be unfenced): nothing was served yet.
        startup.cancel()
        await asyncio.gather(startup, return_exceptions=True)
    else:
        startup.result()
        await stop
    await server.shutdown()


__all__ = ["KafkaRaftServer", "serve"]

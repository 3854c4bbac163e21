"""The network runner: mutated frames sent to a running broker, a healthy client served between bursts.

Each frame is first decoded in-process (``tests/fuzz/inprocess.py``'s path, with the listener's
API table): that predicts which frames the broker answers and where it must close the
connection. A fuzzing connection carries frames up to the first one that ends it (a refusal, an
acks=0 produce, an incomplete frame); the runner reads the answers it expects, then waits for
the close the broker owes it, each read bounded in time. After every burst the healthy client
must still be served.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass
from typing import Any, Iterator

from kio.schema.unregister_broker.v0.request import UnregisterBrokerRequest
from kio.serial import entity_reader
from kio.serial.errors import OutOfBoundValue

from protocol.api_keys import ApiKey, ApiRange, is_supported, response_schema
from protocol.frame import FrameDecoder, FrameTooLarge
from protocol.headers import InvalidRequest, parse_request_header
from protocol.messages import decode_request
from protocol.produce_request import ProduceRequest
from tests.fuzz.corpus import corpus
from tests.fuzz.healthy import HealthyClient
from tests.fuzz.inprocess import MAX_REQUEST_BYTES, check_frame
from tests.fuzz.mutate import Mutant
from tests.fuzz.outcomes import Failure, Outcomes

IO_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class Prediction:
    """What the broker owes a frame: answers (correlation id, api key, version), then the
    connection's fate: "close" (refused), "open" (all answered), "silent" (acks=0 produce: no
    answer, or a close if its records are bad), "incomplete" (the broker waits for more bytes),
    "withheld" (not to be sent: ``disrupts_the_node``)."""

    answers: tuple[tuple[int, int, int], ...]
    fate: str


def disrupts_the_node(request: object, node_id: int) -> bool:
    """A request that legitimately takes the node out of service, as it would in Kafka (nothing
    authenticates it): UnregisterBroker naming the node itself, or, on a controller listener, a
    BrokerRegistration or BrokerHeartbeat speaking for it (a heartbeat can fence it or shut it
    down). The healthy client could not be served after one, so the runner does not send it;
    every one naming another broker goes out."""
    if isinstance(request, UnregisterBrokerRequest):
        return request.broker_id == node_id
    if type(request).__name__ in ("BrokerRegistrationRequest", "BrokerHeartbeatRequest"):
        return getattr(request, "broker_id", None) == node_id
    return False


def predict(data: bytes, apis: dict[int, ApiRange], node_id: int = -1) -> Prediction:
    decoder = FrameDecoder(MAX_REQUEST_BYTES)
    try:
        frames = decoder.feed(data)
    except FrameTooLarge:
        return Prediction((), "close")
    answers = []
    for frame in frames:
        try:
            header = parse_request_header(frame)
        except InvalidRequest:
            return Prediction(tuple(answers), "close")
        if not is_supported(header.api_key, header.api_version, apis):
            if header.api_key != ApiKey.API_VERSIONS:
                return Prediction(tuple(answers), "close")
            answers.append((header.correlation_id, header.api_key, 0))  # KIP-511: answered in v0
            continue
        try:
            request = decode_request(header.api_key, header.api_version, frame, header.body_offset)
        except InvalidRequest:
            return Prediction(tuple(answers), "close")
        if disrupts_the_node(request, node_id):
            return Prediction(tuple(answers), "withheld")
        if isinstance(request, ProduceRequest) and request.acks == 0:
            return Prediction(tuple(answers), "silent")
        answers.append((header.correlation_id, header.api_key, header.api_version))
    return Prediction(tuple(answers), "incomplete" if decoder.buffered else "open")


def _error_codes(value: Any, depth: int = 0) -> Iterator[int]:
    """Every error_code in a response entity, nested ones included."""
    if depth > 6:
        return
    if isinstance(value, tuple):
        for item in value:
            yield from _error_codes(item, depth + 1)
        return
    fields = getattr(value, "__dataclass_fields__", None)
    if not fields:
        return
    for name in fields:
        item = getattr(value, name)
        if name == "error_code":
            yield int(item)
        elif isinstance(item, tuple) or hasattr(item, "__dataclass_fields__"):
            yield from _error_codes(item, depth + 1)


class FuzzConnection:
    """One fuzzing connection: frames go out, the answers and the close are read back."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address, timeout=IO_TIMEOUT_S)
        self.buffer = bytearray()
        self.closed_by_broker = False

    def send(self, data: bytes) -> bool:
        """False when the broker closed the connection, or stopped reading it (it refused an
        earlier frame, or waits on its answers: queued.max.requests)."""
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            self.closed_by_broker = True
            return False
        except TimeoutError:
            return False

    def _fill(self, deadline: float) -> bool:
        """More bytes, or False at the deadline or the broker's close."""
        remaining = deadline - time.monotonic()
        if remaining <= 0 or self.closed_by_broker:
            return False
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout:
            return False
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.closed_by_broker = True
            return False
        self.buffer += chunk
        return True

    def response(self, deadline: float) -> bytes | None:
        while True:
            if len(self.buffer) >= 4:
                (size,) = struct.unpack_from(">i", self.buffer)
                if len(self.buffer) >= 4 + size:
                    frame = bytes(self.buffer[4 : 4 + size])
                    del self.buffer[: 4 + size]
                    return frame
            if not self._fill(deadline):
                return None

    def await_close(self, deadline: float) -> bool:
        while self._fill(deadline):
            pass
        return self.closed_by_broker

    def close(self) -> None:
        self.sock.close()


class NetworkRunner:
    def __init__(self, host: str, port: int, node_id: int, seed: int, apis: dict[int, ApiRange], healthy: HealthyClient, answer_timeout_s: float = 10.0) -> None:
        self.address = (host, port)
        self.node_id = node_id
        self.seed = seed
        self.apis = apis
        self.corpus = corpus(seed, apis)
        self.healthy = healthy
        # Waited only when an answer or a close is late: on this shared 2-core machine the broker
        # went unscheduled for 2-3 s twice in a million frames, and closed on time for it.
        self.answer_timeout_s = answer_timeout_s
        self.result = Outcomes()

    def run(self, frames: int, deadline_s: float, burst: int = 64, alive: Any = None, progress_every: int = 0) -> Outcomes:
        """Up to ``frames`` frames in bursts, the healthy client checked after each; ``alive()``
        says whether the broker process still runs. With ``progress_every``, a line of counts
        goes to stdout every that many frames (the long run)."""
        started = stop = time.monotonic()
        stop += deadline_s
        index = 0
        next_report = progress_every
        while index < frames and time.monotonic() < stop:
            if progress_every and index >= next_report:
                next_report += progress_every
                counts = ", ".join(f"{name} {n}" for name, n in sorted(self.result.counts.items()))
                print(f"fuzz: {index} frames, {time.monotonic() - started:.0f} s, failures {len(self.result.failures)}: {counts}", flush=True)
            end = min(frames, index + burst)
            self._burst(index, end)
            if alive is not None and not alive():
                raise AssertionError(f"the broker died during frames {index}..{end - 1} of seed {self.seed}")
            self.healthy.check(f"seed-{self.seed}-frame-{end}")
            index = end
        return self.result

    def _burst(self, start: int, end: int) -> None:
        index = start
        while index < end:
            conn = FuzzConnection(self.address)
            try:
                index = self._connection(conn, index, end)
            finally:
                conn.close()

    def _connection(self, conn: FuzzConnection, index: int, end: int) -> int:
        """Frames from ``index`` on one connection until one ends it; the next index."""
        owed: list[tuple[int, int, int, int, Mutant]] = []
        fate = "open"
        while index < end and fate == "open":
            mutant = self.corpus.mutant(index)
            check_frame(self.seed, index, mutant, self.result)  # the in-process decoders see it too
            prediction = predict(mutant.frame, self.apis, self.node_id)
            index += 1
            if prediction.fate == "withheld":
                self.result.count("withheld: would take the node out of service")
                break
            owed += [(cid, key, version, index - 1, mutant) for cid, key, version in prediction.answers]
            fate = prediction.fate
            self.result.count("sent")
            if not conn.send(mutant.frame):
                break
        deadline = time.monotonic() + self.answer_timeout_s
        for cid, key, version, frame_index, mutant in owed:
            frame = conn.response(deadline)
            if frame is None and conn.closed_by_broker:
                self.result.count("closed before answering")
                self._fail(frame_index, mutant, "the broker closed the connection before answering this request")
                return index
            if frame is None:
                # A request that parks (a long poll, a rebalance) with a long timeout the mutation gave it.
                self.result.count("unanswered in time")
                return index
            self._classify(frame, cid, key, version, frame_index, mutant)
        if fate == "close":
            closed = conn.await_close(time.monotonic() + self.answer_timeout_s)
            self.result.count("connection closed" if closed else "refused but left open")
            if not closed:
                self._fail(index - 1, self.corpus.mutant(index - 1), "a frame the decoders refuse was not answered by a close")
        elif fate == "silent":
            self.result.count("acks=0 produce")
        elif fate == "incomplete":
            self.result.count("incomplete frame")
        return index

    def _classify(self, frame: bytes, cid: int, key: int, version: int, index: int, mutant: Mutant) -> None:
        (got,) = struct.unpack_from(">i", frame)
        if got != cid:
            self._fail(index, mutant, f"answer for correlation id {got}, expected {cid}")
            return
        header_size = 4 if key == ApiKey.API_VERSIONS or version < self.apis[key].first_flexible else 5
        try:
            response, _ = entity_reader(response_schema(key, version))(memoryview(frame[header_size:]).toreadonly(), 0)
        except Exception as e:  # noqa: BLE001 - an answer kio cannot read is the broker's bug
            if isinstance(e, OutOfBoundValue) and "negative timestamp" in str(e):
                # Kafka's -1 for "no transaction started" (DescribeTransactions): right on the
                # wire, but kio reads timestamps into datetimes, which cannot be negative.
                self.result.count("answered")
                return
            self._fail(index, mutant, f"api {key} v{version} answer does not decode: {e!r}")
            return
        self.result.count("error response" if any(_error_codes(response)) else "answered")

    def _fail(self, index: int, mutant: Mutant, problem: str) -> None:
        self.result.failures.append(Failure(self.seed, index, mutant.mutation, mutant.frame, problem))

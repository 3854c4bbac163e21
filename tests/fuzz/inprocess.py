"""The in-process runner: mutated frames through the broker's own frame decoder, header parser
and request decoders (kio behind the length guard, the hand-written Produce and Fetch readers).

A frame may be refused (too large, a bad header, an API or version no listener serves, a body
that does not decode) or decoded; any exception other than the project's own refusal types is a
crash, recorded with the seed and index that replay it.
"""

from __future__ import annotations

import time
import traceback

from protocol.api_keys import KNOWN_APIS, is_supported
from protocol.frame import FrameDecoder, FrameTooLarge
from protocol.headers import InvalidRequest, parse_request_header
from protocol.messages import decode_request
from tests.fuzz.corpus import corpus
from tests.fuzz.mutate import Mutant
from tests.fuzz.outcomes import Failure, Outcomes

# socket.request.max.bytes' default: frames above it are refused before they are buffered.
MAX_REQUEST_BYTES = 100 * 1024 * 1024


def decode_frames(data: bytes) -> list[str]:
    """The outcome of each frame in ``data`` as the broker's decoding sees it; raises on a crash."""
    decoder = FrameDecoder(MAX_REQUEST_BYTES)
    try:
        frames = decoder.feed(data)
    except FrameTooLarge:
        return ["frame refused"]
    outcomes = []
    for frame in frames:
        try:
            header = parse_request_header(frame)
        except InvalidRequest:
            outcomes.append("header refused")
            break  # the connection is closed: later frames are never read
        if not is_supported(header.api_key, header.api_version, KNOWN_APIS):
            outcomes.append("unsupported api")
            break
        try:
            decode_request(header.api_key, header.api_version, frame, header.body_offset)
        except InvalidRequest:
            outcomes.append("decode error")
            break
        outcomes.append("decoded")
    if decoder.buffered and len(outcomes) == len(frames):
        outcomes.append("incomplete frame")
    return outcomes


def run_in_process(seed: int, frames: int, deadline_s: float) -> Outcomes:
    """Up to ``frames`` mutated frames (fewer if ``deadline_s`` passes first)."""
    requests = corpus(seed)
    result = Outcomes()
    stop = time.monotonic() + deadline_s
    for index in range(frames):
        if index % 256 == 0 and time.monotonic() > stop:
            break
        mutant = requests.mutant(index)
        check_frame(seed, index, mutant, result)
    return result


def check_frame(seed: int, index: int, mutant: Mutant, result: Outcomes) -> None:
    result.frames += 1
    result.mutations[mutant.mutation] += 1
    try:
        outcomes = decode_frames(mutant.frame)
    except Exception:  # noqa: BLE001 - the point: anything but the refusal types is a bug
        result.count("crash")
        result.failures.append(Failure(seed, index, mutant.mutation, mutant.frame, traceback.format_exc(limit=-4)))
        return
    for outcome in outcomes:
        result.count(outcome)


"""SslTransportLayer: TLS for one client connection, over its raw non-blocking socket.

The Connection drives its socket from the loop's reader and writer callbacks, not a transport,
so TLS runs in memory: an ``ssl.SSLObject`` between two ``MemoryBIO``s, with the ciphertext moved
to and from the socket here. The calls mirror the socket's (``recv_into``, ``sendmsg``), so the
Connection reads frames and writes answers as it does in plaintext. ``sendfile`` cannot cross
user-space TLS: record bytes are read from the segment and encrypted (``send_region``).

Two things plaintext does not have: a readable socket is not the only sign of readable data
(one socket read can bring several TLS records, decrypted only as the Connection asks), so the
Connection asks again while ``has_buffered``; and ciphertext may wait for the socket with no
answer left to write (``flush``), so the writer callback stays until it is out.
"""

from __future__ import annotations

import os
import socket
import ssl
from typing import Sequence

# Ciphertext read from the socket per call.
RECV_CHUNK = 64 * 1024
# Plaintext encrypted per send: bounds the ciphertext held for a client that reads slowly.
SEND_CHUNK = 256 * 1024

Buffer = bytes | bytearray | memoryview


class SslTransportLayer:
    def __init__(self, sock: socket.socket, context: ssl.SSLContext) -> None:
        self._sock = sock
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._handshaken = False
        self._unsent = memoryview(b"")  # ciphertext the socket has not taken yet

    @property
    def handshaken(self) -> bool:
        return self._handshaken

    def peer_certificate(self) -> bytes | None:
        """The client's certificate (DER), once the handshake is done; None if it gave none."""
        return self._ssl.getpeercert(binary_form=True) or None

    @property
    def has_buffered(self) -> bool:
        """Bytes already read from the socket that may hold more plaintext."""
        return self._ssl.pending() > 0 or self._incoming.pending > 0

    @property
    def wants_write(self) -> bool:
        return bool(self._unsent) or self._outgoing.pending > 0

    def recv_into(self, buffer: bytearray | memoryview) -> int:
        """As ``socket.recv_into``: plaintext bytes read, 0 at the end of the stream, and
        BlockingIOError while no whole record has arrived. A peer that breaks TLS (a bad
        handshake, a corrupt record) raises ``ssl.SSLError``."""
        while True:
            try:
                if not self._handshaken:
                    self._ssl.do_handshake()
                    self._handshaken = True
                n = self._ssl.read(len(buffer), buffer)
                self.flush()  # TLS 1.3 may have something to say after a read (a key update)
                return n
            except ssl.SSLWantReadError:
                self.flush()  # the handshake's next flight
                data = self._sock.recv(RECV_CHUNK)
                if not data:
                    return 0
                self._incoming.write(data)
            except ssl.SSLZeroReturnError:
                return 0  # the client's close_notify

    def sendmsg(self, buffers: Sequence[Buffer], ancdata: Sequence[object] = (), flags: int = 0) -> int:
        """As ``socket.sendmsg``: the plaintext bytes taken, up to SEND_CHUNK. While earlier
        ciphertext is still waiting for the socket nothing is taken (BlockingIOError)."""
        if not self.flush():
            raise BlockingIOError
        taken = 0
        for buffer in buffers:
            view = memoryview(buffer).cast("B")
            if not view:
                continue
            piece = view[: SEND_CHUNK - taken]
            taken += self._ssl.write(piece)
            if len(piece) < len(view) or taken >= SEND_CHUNK:
                break
        self.flush()
        return taken

    def send_region(self, fd: int, position: int, length: int) -> int:
        """Read up to SEND_CHUNK bytes of a file at ``position`` and send them encrypted."""
        if not self.flush():
            raise BlockingIOError
        data = os.pread(fd, min(length, SEND_CHUNK), position)
        if not data:
            # The file shrank under us: the frame size is already promised.
            raise ConnectionError("segment file shorter than the region being sent")
        return self.sendmsg([data])

    def flush(self) -> bool:
        """Send the ciphertext waiting; True when none is left."""
        if self._outgoing.pending:
            data = self._outgoing.read()
            self._unsent = memoryview(bytes(self._unsent) + data if self._unsent else data)
        while self._unsent:
            try:
                sent = self._sock.send(self._unsent)
            except (BlockingIOError, InterruptedError):
                return False
            self._unsent = self._unsent[sent:]
        return True

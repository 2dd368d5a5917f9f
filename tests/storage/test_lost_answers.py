"""A write the storage server carried out whose answer never reached the client (the connection died after the
request went out and before the reply came back): Ice sends the idempotent write again on its own, and a client
told "cannot reach" keeps the batch and sends it again later. Either way each record is stored once. Real storage
server and SQLite store, and a real TCP relay between client and server that swallows the server's replies."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from crawler_client.gateways import IceStorage
from icecrawler import rpc
from icecrawler.errors import ServiceError
from tests.storage.conftest import StorageServerRunner, make_review

pytestmark = [pytest.mark.ice]

#: Ice protocol: every message starts with a 14-byte header; byte 8 is its type, bytes 10-13 its whole size.
_HEADER = 14
_REPLY = 2
BATCH = 100
#: What the test relies on, set rather than left to Ice's default (the same): a call whose connection fails is
#: sent again once, at once; a second failure reaches the caller.
ONE_RETRY = {"Ice.RetryIntervals": "0"}


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    """``size`` bytes, or b"" if the peer closed first."""
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return b""
        data += chunk
    return data


class AnswerEater:
    """A relay on loopback to the server at ``target_port`` that passes everything through, except that on each of
    its first ``eat`` connections the server's first reply is swallowed and both sides are closed: the request was
    carried out, its answer lost on the way."""

    def __init__(self, target_port: int, eat: int) -> None:
        self.target_port = target_port
        self.to_eat = eat
        self.eaten = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._stopped = threading.Event()
        self._sockets: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, name="answer-eater", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
            client.settimeout(None)
            server.settimeout(None)
            with self._lock:
                self._sockets += [client, server]
                eat = self.to_eat > 0
                self.to_eat -= 1 if eat else 0
            threading.Thread(target=self._up, args=(client, server), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, eat), daemon=True).start()

    @staticmethod
    def _close(*sockets: socket.socket) -> None:
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _up(self, client: socket.socket, server: socket.socket) -> None:
        """Client to server, byte for byte."""
        with contextlib.suppress(OSError):
            while chunk := client.recv(1 << 16):
                server.sendall(chunk)
        self._close(client, server)

    def _down(self, server: socket.socket, client: socket.socket, eat: bool) -> None:
        """Server to client, message by message; the first reply is eaten on a connection marked ``eat``."""
        with contextlib.suppress(OSError):
            while header := _read_exactly(server, _HEADER):
                body = _read_exactly(server, int.from_bytes(header[10:14], "little") - _HEADER)
                if eat and header[8] == _REPLY:
                    with self._lock:
                        self.eaten += 1
                    break
                client.sendall(header + body)
        self._close(server, client)

    def close(self) -> None:
        self._stopped.set()
        self._listener.close()
        self._thread.join(timeout=5)
        with self._lock:
            self._close(*self._sockets)


@contextmanager
def answer_eater(target_port: int, eat: int) -> Iterator[AnswerEater]:
    relay = AnswerEater(target_port, eat)
    try:
        yield relay
    finally:
        relay.close()


@pytest.mark.parametrize("lost", [1, 2])
def test_a_write_whose_answer_was_lost_and_is_sent_again_is_stored_once(tmp_path: Path, lost: int) -> None:
    """One lost answer: Ice sends the write again by itself (``writeReviews`` is idempotent) and the caller sees an
    answer. Two in a row: the caller is told it could not reach the server and sends the batch again, as a client's
    sink does. The server carried the write out each time; each record is stored once."""
    runner = StorageServerRunner(tmp_path / "server", {})
    runner.start()
    reviews = [make_review(f"r{n}", minute=n % 60) for n in range(BATCH)]
    try:
        with rpc.communicator(properties=ONE_RETRY) as comm, answer_eater(runner.port, eat=lost) as relay:
            through = rpc.crawler().StoragePrx(comm, f"{rpc.STORAGE_IDENTITY}:tcp -h 127.0.0.1 -p {relay.port}")
            storage = IceStorage(through)
            if lost == 1:
                assert storage.write_reviews(reviews) == BATCH
            else:
                with pytest.raises(ServiceError, match="cannot reach"):
                    storage.write_reviews(reviews)
                assert storage.write_reviews(reviews) == BATCH  # sent again, as the client's sink does
            assert relay.eaten == lost
            stats = runner.proxy(comm).stats()
            assert stats.writesAccepted == (lost + 1) * BATCH  # the server took the batch each time it came
            assert (stats.reviews, stats.spoolDepth) == (BATCH, 0)  # and holds each record once
    finally:
        runner.stop()

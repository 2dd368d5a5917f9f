"""Bounded memory per request, measured on the real daemons (``/proc/PID/status``: VmHWM is the peak RSS).

Why: with a 64 MiB message limit everywhere, one 63 MiB ``writeReviews`` took the storage server to +1.8 GiB,
a 163-byte bzip2 request expanded to 63 MiB, and peers trickling bytes kept partial messages pinned. Now each
daemon's adapter accepts at most its derived ``MessageSizeMax`` (``icecrawler.limits``): a larger request is
refused from its header, a compressed one from the uncompressed size its header names, and the worst request
that is accepted (the most, smallest records that fit) costs at most ``limits.AMPLIFICATION`` times its size.
Each test sends the largest accepted message and several over-size ones at once, checks the daemon's peak RSS
against the documented bound (``limits.rss_bound_mib``), and that another client is served throughout.
"""

from __future__ import annotations

import bz2
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import Ice
import pytest

from icecrawler import limits, rpc
from icecrawler.processes import ManagedProcess, ProcessGroup, free_port
from icecrawler.settings import Settings
from icecrawler_local.launcher import Cluster

pytestmark = [pytest.mark.ice, pytest.mark.e2e, pytest.mark.slow]

#: Idle timeout the daemons run with here (production: 30 s), so that a silent peer is dropped quickly.
IDLE_TIMEOUT_S = 2
OVERSIZE_AT_ONCE = 4
#: The idle timeout is not negotiated: a client must send heartbeats (every half of its own) within the server's.
CLIENT = {"Ice.Connection.Client.IdleTimeout": str(IDLE_TIMEOUT_S)}


def _memory_mib(pid: int) -> dict[str, int]:
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            values[key] = int(rest.split()[0]) // 1024
    return values


def _ice_header(size: int, compress: int = 0) -> bytes:
    """An Ice 1.0 request message header (magic, protocol 1.0, encoding 1.0, type 0 = request)."""
    return b"IceP\x01\x00\x01\x00\x00" + bytes([compress]) + struct.pack("<i", size)


def _raw_peer(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    assert sock.recv(14)[:4] == b"IceP"  # the server's ValidateConnection message
    return sock


def _closed_by_server(sock: socket.socket) -> bool:
    """Block (at most the socket timeout) until the server closes the connection; True if it did."""
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except OSError:
        return True
    return True


class Daemon:
    def __init__(self, process: ManagedProcess, proxy: str, port: int, limit_kib: int) -> None:
        self.process = process
        self.proxy = proxy
        self.port = port
        self.limit_kib = limit_kib


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Daemon]]:
    work = tmp_path_factory.mktemp("memory")
    ports = {"scheduler": free_port(), "storage": free_port()}
    settings = Settings()
    idle = {"Ice.Connection.Server.IdleTimeout": str(IDLE_TIMEOUT_S)}
    with ProcessGroup(work / "logs") as group:
        cluster = Cluster(work, group)
        scheduler, storage = (
            cluster.start_server(name, "127.0.0.1", ports[name], ice=idle, wait=False)
            for name in ("scheduler", "storage")
        )
        for process, port in ((scheduler, ports["scheduler"]), (storage, ports["storage"])):
            cluster.wait_listening(process, "127.0.0.1", port, timeout_s=30)
        yield {
            "scheduler": Daemon(
                scheduler,
                f"scheduler:tcp -h 127.0.0.1 -p {ports['scheduler']}",
                ports["scheduler"],
                limits.scheduler_message_kib(settings),
            ),
            "storage": Daemon(
                storage,
                f"storage:tcp -h 127.0.0.1 -p {ports['storage']}",
                ports["storage"],
                limits.storage_message_kib(settings),
            ),
        }
        assert scheduler.alive(), scheduler.log_tail()
        assert storage.alive(), storage.log_tail()


def _review(index: int, content: str) -> Any:
    return rpc.crawler().Review(
        id=f"r{index}",
        productId="12",
        source="ecshop",
        user="u",
        content=content,
        score=5,
        createdAt="2024-05-01T12:00:00+08:00",
        fetchedAt="2024-05-01T12:00:00+08:00",
    )


def _fill(limit_kib: int, per_item: int) -> int:
    """How many items of ``per_item`` wire bytes fit in a request of the limit (with room for the headers)."""
    return (limit_kib * 1024 - 1024) // per_item


#: Per daemon: the largest legitimate request (accepted and applied), the worst accepted one (as many of the
#: smallest items as fit: refused by the batch limit only after Ice built every item), and an over-size one.
Calls = dict[str, Callable[[Any, int], object]]
CALLS: dict[str, Calls] = {
    "storage": {
        "largest": lambda s, k: s.writeReviews(
            [_review(i, "x" * (limits.RECORD_WIRE_KIB * 1024 - 150)) for i in range(5000)]
        ),
        "worst": lambda s, k: s.writeReviews([rpc.crawler().Review() for _ in range(_fill(k, 11))]),
        "oversize": lambda s, k: s.writeReviews([_review(i, "y" * 4000) for i in range(k // 3)]),
    },
    "scheduler": {
        "largest": lambda s, k: s.addUsers(
            [f"weibo_pc:{10**12 + i}" for i in range(1000)], rpc.crawler().TaskKind.WeiboUser
        ),
        "worst": lambda s, k: s.addUsers([""] * _fill(k, 1), rpc.crawler().TaskKind.WeiboUser),
        "oversize": lambda s, k: s.addUsers(["x" * 4000] * (k // 3), rpc.crawler().TaskKind.WeiboUser),
    },
}


class Bystander(threading.Thread):
    """Another client calling ``stats`` over and over: it must keep being answered."""

    def __init__(self, proxy: str, daemon: str) -> None:
        super().__init__(daemon=True)
        self.proxy, self.kind = proxy, daemon
        self.stop = threading.Event()
        self.answers = 0
        self.failures: list[str] = []

    def run(self) -> None:
        C = rpc.crawler()
        with rpc.communicator((), CLIENT) as comm:
            proxy = (C.SchedulerPrx if self.kind == "scheduler" else C.StoragePrx)(comm, self.proxy)
            while not self.stop.is_set():
                try:
                    proxy.stats()
                    self.answers += 1
                except Ice.Exception as exc:
                    self.failures.append(type(exc).__name__)


@pytest.mark.parametrize("name", ["storage", "scheduler"])
def test_rss_stays_under_the_bound(name: str, daemons: dict[str, Daemon]) -> None:
    daemon, calls = daemons[name], CALLS[name]
    C = rpc.crawler()
    idle = _memory_mib(daemon.process.pid)["VmRSS"]
    bystander = Bystander(daemon.proxy, name)
    bystander.start()
    try:
        with rpc.communicator((), {**CLIENT, "Ice.MessageSizeMax": "0"}) as comm:  # 0: it sends anything
            proxy = (C.SchedulerPrx if name == "scheduler" else C.StoragePrx)(comm, daemon.proxy)
            calls["largest"](proxy, daemon.limit_kib)  # accepted and applied
            with pytest.raises(C.InvalidArgument) as refused:
                calls["worst"](proxy, daemon.limit_kib)
            assert refused.value.code == C.ErrorCode.BatchTooLarge
            assert len(refused.value.message) < 300  # the message names the count, never the batch
            errors: list[str] = []

            def oversize() -> None:
                try:
                    calls["oversize"](proxy, daemon.limit_kib)
                except Ice.ConnectionLostException:
                    errors.append("refused")

            threads = [threading.Thread(target=oversize) for _ in range(OVERSIZE_AT_ONCE)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(120)
            assert errors == ["refused"] * OVERSIZE_AT_ONCE
    finally:
        bystander.stop.set()
        bystander.join(30)
    peak = _memory_mib(daemon.process.pid)["VmHWM"]
    bound = limits.rss_bound_mib(name, idle, daemon.limit_kib, dispatching=1, receiving=OVERSIZE_AT_ONCE)
    print(f"{name}: idle {idle} MiB, peak {peak} MiB, bound {bound} MiB, limit {daemon.limit_kib} KiB")
    assert peak <= bound, f"{name}: peak RSS {peak} MiB over the bound {bound} MiB (idle {idle} MiB)"
    assert bystander.answers > 0 and not bystander.failures, bystander.failures
    assert daemon.process.alive()


@pytest.mark.parametrize("name", ["storage", "scheduler"])
def test_a_compressed_request_is_bounded_by_its_uncompressed_size(name: str, daemons: dict[str, Daemon]) -> None:
    """A ~100-byte bzip2 request that would expand to 63 MiB is refused before it is expanded."""
    daemon = daemons[name]
    before = _memory_mib(daemon.process.pid)["VmRSS"]
    inflated = 63 * 1024 * 1024
    body = struct.pack("<i", 14 + inflated) + bz2.compress(bytes(inflated))
    assert len(body) < 1000
    with _raw_peer(daemon.port) as sock:
        sock.sendall(_ice_header(14 + len(body), compress=2) + body)
        assert _closed_by_server(sock)
    after = _memory_mib(daemon.process.pid)["VmRSS"]
    assert after - before < daemon.limit_kib // 1024 + 16
    with rpc.communicator((), CLIENT) as comm:  # still serving
        C = rpc.crawler()
        (C.SchedulerPrx if name == "scheduler" else C.StoragePrx)(comm, daemon.proxy).stats()


@pytest.mark.parametrize("name", ["storage", "scheduler"])
def test_an_idle_peer_with_a_partial_request_is_dropped(name: str, daemons: dict[str, Daemon]) -> None:
    """A peer that sent most of a request and then nothing is disconnected by the idle timeout, which frees
    the partial message; a peer announcing more than the limit is refused at once."""
    daemon = daemons[name]
    size = daemon.limit_kib * 1024 - 4096
    with _raw_peer(daemon.port) as sock:
        sock.sendall(_ice_header(size) + bytes(size // 2))
        sock.settimeout(IDLE_TIMEOUT_S * 10)
        assert _closed_by_server(sock)  # not after the socket's own timeout: the server hung up
    with _raw_peer(daemon.port) as sock:
        sock.sendall(_ice_header(daemon.limit_kib * 1024 + 1))
        sock.settimeout(IDLE_TIMEOUT_S * 10)
        assert _closed_by_server(sock)


def test_errors_quote_only_a_prefix_of_a_huge_argument(daemons: dict[str, Daemon]) -> None:
    C = rpc.crawler()
    huge = "9" * 3_000_000
    with rpc.communicator((), CLIENT) as comm:
        scheduler = C.SchedulerPrx(comm, daemons["scheduler"].proxy)
        storage = C.StoragePrx(comm, daemons["storage"].proxy)
        calls: list[Callable[[], object]] = [
            lambda: scheduler.addUsers([f"weibo_pc:{huge}"], C.TaskKind.WeiboUser),
            lambda: scheduler.taskInfo(f"user:weibo_pc:{huge}"),
            lambda: scheduler.putUsers([C.Report(taskId=f"user:weibo_pc:{huge}", leaseToken="x")]),
            lambda: storage.writeReviews([_huge_review(huge)]),
        ]
        for call in calls:
            with pytest.raises(C.InvalidArgument) as refused:
                call()
            error = refused.value
            text = " ".join([error.message, error.field, *getattr(error, "reasons", [])])
            assert len(text) < 1000 and huge not in text, text[:200]


def _huge_review(product_id: str) -> Any:
    review = _review(1, "x")
    review.productId = product_id
    return review

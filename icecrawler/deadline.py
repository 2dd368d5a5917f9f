"""One deadline for a whole fetch, enforced on the socket: ``client.total_timeout_s`` from the name lookup to the
body's last byte.

A socket timeout bounds one read, not a response. A server (or a tarpit in front of it) that sends one byte a little
faster than ``client.timeout_s`` passes every read: http.client reads the status line and headers a line at a time
and a body read fills its whole buffer, so such a drip held a worker for days before its first check. A check
between reads cannot help while the read itself does not return. So every fetch of a process registers its deadline
with one watchdog thread; when a deadline passes before its fetch is done, the watchdog shuts down the sockets the
fetch is using, the blocked read returns at once, and the fetch ends as a Timeout (``Watch.expired`` says why).

A connection is watched from its TCP connect on. A proxy's answer to CONNECT is read a line at a time, like headers,
so it can be dripped too (a TLS handshake cannot hold a fetch past the read timeout: CPython bounds the whole
handshake by it). A TLS layer takes its socket's descriptor over and leaves the socket object without one, so while a
connection is being set up the watch holds a duplicate of the descriptor (``attach_setup``): shutting that down ends
the connection under every layer.

Before the connect there is no socket to shut down: the name lookup blocks inside the C library, which a site's slow
name servers can hold for the resolver's timeout times its attempts and servers (10 s or more by default). So a new
connection's lookup and TCP connect run on a helper thread the fetch waits for no longer than its deadline
(``call_within``); a socket that arrives after the fetch gave up is closed. The helper itself ends when the resolver
gives up.

The watchdog keeps the fetches in a heap by deadline. A fetch that ends is only marked: it leaves the heap when it
reaches the top, so registering costs one push and ending costs nothing, and the thread wakes only for the
earliest deadline still running. A process forked from one whose watchdog runs starts a thread of its own.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import os
import queue
import socket
import threading
import time
import weakref
from collections.abc import Callable

__all__ = ["WATCHDOG", "DeadlinePassed", "Watch", "Watchdog"]

log = logging.getLogger(__name__)


class Watch:
    """One fetch's deadline and the sockets it reads. Made by ``Watchdog.watch``; only the watchdog's lock
    changes it."""

    __slots__ = ("_sockets", "deadline", "done", "expired")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        #: True once the deadline passed before the fetch was done (its sockets were shut down).
        self.expired = False
        self.done = False
        self._sockets: list[object] = []


class DeadlinePassed(TimeoutError):
    """A step run by ``Watchdog.call_within`` had not finished when its fetch's deadline passed."""


class _Abandonable[T]:
    """The outcome of one ``call_within`` step, handed over under a lock so that exactly one side owns the result:
    the waiting fetch, or (once the fetch has given up) ``discard``."""

    def __init__(self, discard: Callable[[T], object]) -> None:
        self._lock = threading.Lock()
        self._finished = threading.Event()
        self._discard = discard
        self._abandoned = False
        self.value: T | None = None
        self.error: BaseException | None = None

    def run(self, call: Callable[[], T]) -> None:
        try:
            value = call()
        except BaseException as exc:  # handed to the waiting fetch, which raises it
            with self._lock:
                self.error = exc
                self._finished.set()
            return
        with self._lock:
            if not self._abandoned:
                self.value = value
                self._finished.set()
                return
        try:
            self._discard(value)
        except Exception:
            log.exception("could not discard what a step finished after its fetch's deadline")

    def wait(self, seconds: float) -> bool:
        """True once the step finished within ``seconds``; False, and the result is abandoned, otherwise (also when
        the wait itself is interrupted: a late socket must not be left to the garbage collector)."""
        try:
            self._finished.wait(max(0.0, seconds))
        finally:
            with self._lock:
                self._abandoned = not self._finished.is_set()
        return not self._abandoned


class _Helpers:
    """The threads that run ``call_within`` steps, kept for reuse: a thread started per step cost a new connection
    three times as much (196 against 67 µs, ``icecrawler bench client --only-connect``). A step never waits for a busy
    helper (one stuck in a slow lookup must not hold another site's fetch): a new one starts whenever none is idle,
    and a helper idle for ``idle_s`` ends."""

    def __init__(self, idle_s: float = 60.0) -> None:
        self.idle_s = idle_s
        self._lock = threading.Lock()
        self._idle = 0  # helpers waiting for a step and not yet promised one
        self._steps: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()

    def run(self, step: Callable[[], None]) -> None:
        with self._lock:
            start = self._idle == 0
            if not start:
                self._idle -= 1  # promised this step
        self._steps.put(step)
        if start:
            threading.Thread(target=self._serve, name="fetch-connect", daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                step = self._steps.get(timeout=self.idle_s)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0:  # not promised a step: end
                        self._idle -= 1
                        return
                continue  # promised one that is on its way
            step()
            with self._lock:
                self._idle += 1


def _shut(sock: object) -> None:
    if not isinstance(sock, socket.socket):  # TLS inside a TLS proxy tunnel: the tunnel's socket carries it
        sock = getattr(sock, "socket", None)
    if not isinstance(sock, socket.socket):  # nothing we know how to shut
        return
    try:
        # The plain socket's shutdown even on a TLS socket: it wakes the blocked read without touching TLS state
        # another thread is using. A socket closed since has no descriptor left: that is an OSError here, never
        # a shutdown of whatever reuses its number.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


#: Every watchdog of the process, for the one fork hook below.
_WATCHDOGS: weakref.WeakSet[Watchdog] = weakref.WeakSet()


class Watchdog:
    """Shuts down the sockets of fetches that outlive their deadline (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Condition()
        self._heap: list[tuple[float, int, Watch]] = []
        self._order = itertools.count()  # ties broken by arrival: a Watch does not compare
        self._thread: threading.Thread | None = None
        self._helpers = _Helpers()
        _WATCHDOGS.add(self)

    def _forget_after_fork(self) -> None:
        """In a forked child: the parent's watchdog thread did not come along, nor did its helpers or the fetches it
        watched (and its lock may have been held by a parent thread at the fork). The child's first watch starts a
        thread, its first step a helper."""
        self._lock = threading.Condition()
        self._heap = []
        self._thread = None
        self._helpers = _Helpers(self._helpers.idle_s)

    def watch(self, seconds: float) -> Watch:
        """A watch that expires ``seconds`` from now unless ``release``d first."""
        watch = Watch(self._clock() + seconds)
        with self._lock:
            heapq.heappush(self._heap, (watch.deadline, next(self._order), watch))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="fetch-deadlines", daemon=True)
                self._thread.start()
            elif self._heap[0][2] is watch:  # earlier than what the thread waits for
                self._lock.notify()
        return watch

    def attach(self, watch: Watch, sock: object) -> None:
        """The fetch reads from ``sock`` from now on (the socket itself, not its connection: http.client lets go of
        a connection's socket once the headers say it closes after the body); shut down at once if the deadline
        has passed. Anything but a socket, or a TLS tunnel holding one in ``socket``, is passed over."""
        with self._lock:
            if watch.expired:
                _shut(sock)
            elif not watch.done:
                watch._sockets.append(sock)

    def attach_setup(self, watch: Watch, sock: socket.socket) -> Callable[[], None]:
        """Watch the connection of ``sock`` while a TLS layer or a proxy tunnel is set up on it (see the module
        docstring), and return the call that ends that. The watch holds a duplicate descriptor, which keeps the
        connection open until closed: call what this returns once the setup is over, whatever its outcome."""
        copy = sock.dup()
        self.attach(watch, copy)

        def setup_over() -> None:
            with self._lock:
                if copy in watch._sockets:
                    watch._sockets.remove(copy)
            copy.close()

        return setup_over

    def call_within[T](self, watch: Watch, call: Callable[[], T], discard: Callable[[T], object]) -> T:
        """``call()``, a step with no socket yet to shut down (a new connection's name lookup and TCP connect), on a
        helper thread, waited for no longer than the watch's deadline; its exception is raised here. Past the deadline
        the watch is expired, DeadlinePassed is raised, and whatever ``call`` returns later goes to ``discard``."""
        step = _Abandonable[T](discard)
        self._helpers.run(functools.partial(step.run, call))
        if not step.wait(watch.deadline - self._clock()):
            with self._lock:
                watch.expired = True
            raise DeadlinePassed("the connection was not set up within the fetch's deadline (name lookup, connect)")
        if step.error is not None:
            raise step.error
        return step.value  # type: ignore[return-value]

    def detach_all(self, watch: Watch) -> None:
        """The fetch's sockets went back to their pool (a redirect's hop): not to be shut down for it."""
        with self._lock:
            watch._sockets.clear()

    def release(self, watch: Watch) -> None:
        """The fetch is done: its sockets are no longer watched."""
        with self._lock:
            watch.done = True
            watch._sockets.clear()

    def running(self) -> int:
        """Watches not yet released nor expired (for tests: every fetch releases its watch)."""
        with self._lock:
            return sum(1 for _, _, watch in self._heap if not (watch.done or watch.expired))

    def _run(self) -> None:
        with self._lock:
            while True:
                heap = self._heap
                while heap and heap[0][2].done:
                    heapq.heappop(heap)
                if not heap:
                    self._lock.wait()
                    continue
                wait = heap[0][0] - self._clock()
                if wait > 0:
                    self._lock.wait(wait)
                    continue
                watch = heapq.heappop(heap)[2]
                watch.expired = True
                for sock in watch._sockets:
                    try:
                        _shut(sock)
                    except Exception:  # the thread serves every fetch of the process: it must outlive any one
                        log.exception("could not shut down a socket past its fetch's deadline")


def _forget_after_fork() -> None:
    for watchdog in list(_WATCHDOGS):
        watchdog._forget_after_fork()


os.register_at_fork(after_in_child=_forget_after_fork)

#: The process's watchdog: every real fetch of a client registers here.
WATCHDOG = Watchdog()

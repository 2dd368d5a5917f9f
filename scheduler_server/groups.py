"""Group commit for the scheduler core (pure threading, no storage or Ice).

Many clients making small calls (getUser/putUser) would each pay for a transaction, an expiry pass and an fsync,
and the dispatch threads would hand the core's lock and the GIL back and forth for every one of them. So calls
are run in groups. Step by step, for one call:

1. The core wraps the change in a ``GroupCall`` and ``submit``s it, deferred. If a group is already running (or
   queued for someone to run), the call only joins the queue and ``submit`` returns its ``Pending`` future.
2. If nobody runs the queue, the caller becomes its runner, but not yet: the queue is handed to the caller's own
   future (``Pending.run_first``), and ``submit`` returns. The Ice servant returns that future (asynchronous
   dispatch); Ice registers its reply callback on it (``add_done_callback``), and only that registration runs
   the queue, in the dispatch thread. So the runner's reply is registered before its group runs, and leaves as
   soon as its own group is done rather than after every group queued behind it. A caller inside the process
   (the core's blocking methods) consumes its future with ``GroupRunner.wait`` instead.
3. The runner takes every call queued so far as one group. The core's ``run_group`` runs them in one
   transaction and sets each call's result or error (each call still succeeds or fails on its own).
4. Calls that need no durability complete at once; the others complete after one shared ``sync`` (the fsync).
   A failing sync fails exactly the durable calls of that group.
5. The runner loops to step 3 until the queue is empty, then marks the runner idle.

Guard: a handed-off future that is never consumed (say, a dispatch dropped before Ice registered its reply)
would hold the queue for ever. After ``stall_s`` the next submitter, a blocking ``wait``er, the scheduler's
maintenance tick (``rescue``) or ``close`` takes the queue over; the late consumer then finds nothing to run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["GroupCall", "GroupRunner", "Pending"]

#: Guards every Pending's state: each holds it for a few instructions, and one lock is cheaper than one each.
_PENDING_LOCK = threading.Lock()


class Pending[T]:
    """A result to come: the part of ``concurrent.futures.Future`` that a waiting caller and Ice's asynchronous
    dispatch use (``result``, ``exception``, ``done``, ``add_done_callback``), at a fraction of its cost, which
    counts when every getUser and putUser makes one (``icecrawler bench scheduler`` measures the cycle).
    Completed once, by ``set_result`` or ``set_exception``.

    A future may carry work to run first (``run_first``): the first ``add_done_callback``, ``result`` or
    ``exception`` runs it, in the caller's thread, after registering the callback. ``GroupRunner`` hands its
    queue to a caller this way, so that the caller's own reply goes out as soon as its group completes."""

    __slots__ = ("_callbacks", "_done", "_error", "_event", "_first", "_result")

    def __init__(self) -> None:
        self._done = False
        self._result: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Pending[T]], object]] = []
        self._event: threading.Event | None = None
        self._first: Callable[[], object] | None = None

    def run_first(self, work: Callable[[], object]) -> None:
        """Give this future work that its consumer runs first (see the class docstring). Only the thread that
        will consume the future may call this, before handing the future over."""
        self._first = work

    def _start(self) -> None:
        work, self._first = self._first, None
        if work is not None:
            work()

    def done(self) -> bool:
        return self._done

    def result(self, timeout: float | None = None) -> T:
        """The result, waiting up to ``timeout`` seconds (forever if None); raises the call's error, or
        TimeoutError."""
        error = self.exception(timeout)
        if error is not None:
            raise error
        return self._result  # type: ignore[no-any-return]

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._start()
        if not self._done:
            with _PENDING_LOCK:
                if not self._done and self._event is None:
                    self._event = threading.Event()
                event = self._event
            if event is not None and not event.wait(timeout):
                raise TimeoutError("the call has not completed yet")
        return self._error

    def add_done_callback(self, callback: Callable[[Pending[T]], object]) -> None:
        """Call ``callback(self)`` once completed: at once (in this thread) if already so."""
        with _PENDING_LOCK:
            waiting = not self._done
            if waiting:
                self._callbacks.append(callback)
        if not waiting:
            callback(self)
        self._start()

    def set_result(self, result: T) -> None:
        self._result = result
        self._complete()

    def set_exception(self, error: BaseException) -> None:
        self._error = error
        self._complete()

    def _complete(self) -> None:
        with _PENDING_LOCK:
            self._done = True
            callbacks, self._callbacks = self._callbacks, []
            event = self._event
        if event is not None:
            event.set()
        for callback in callbacks:
            callback(self)


class GroupCall:
    """One caller's change. ``run`` is what the core runs inside the group's transaction (the core defines its
    arguments); the ``run_group`` callback the runner was built with (``SchedulerCore._run_calls``) sets ``result``
    or ``error`` of every call it was given. (A plain class with slots: one is made per getUser or putUser.)"""

    __slots__ = ("durable", "error", "future", "result", "run")

    def __init__(self, run: Callable[..., Any], durable: bool) -> None:
        self.run = run
        #: Completed only after ``sync()`` returned (adds, reports, releases).
        self.durable = durable
        self.future: Pending[Any] = Pending()
        self.result: Any = None
        self.error: BaseException | None = None


class GroupRunner:
    """Runs submitted calls in groups, each group followed by one shared sync; see the module docstring."""

    def __init__(
        self, run_group: Callable[[list[GroupCall]], None], sync: Callable[[], None], *, stall_s: float = 1.0
    ) -> None:
        self._run_group = run_group
        self._sync = sync
        self._queue: list[GroupCall] = []
        # Every call takes the lock a few times, so it is taken directly (in C); only ``close`` waits on the
        # condition, and it is notified only once closing.
        self._lock = threading.Lock()
        self._state = threading.Condition(self._lock)
        self._running = False
        self._closed = False
        #: The deferred future that holds the queue until its consumer runs it (None once someone ran it), and
        #: since when. A consumer that never comes (a dispatch dropped before Ice registered its reply) would
        #: stall every caller behind it, so after ``stall_s`` the next submitter, ``rescue`` or ``close`` runs it.
        self._handoff: Pending[Any] | None = None
        self._handoff_since = 0.0
        self._stall_s = stall_s

    def submit(self, call: GroupCall, *, deferred: bool = False) -> Pending[Any]:
        """Queue ``call`` (and run the queue if nobody does); its future completes with its result or error.
        RuntimeError once closed.

        ``deferred``: a caller that finds nobody running the queue does not run it here; its future runs it when
        the caller first waits on it or adds a callback (``Pending.run_first``). An asynchronous dispatch so
        registers its reply before the queue runs, and the reply leaves as soon as its own group is done, not
        after every group queued behind it. The caller must consume the future, or the queue stalls."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the group runner is closed")
            self._queue.append(call)
            if self._running:
                if not self._claim_stalled(self._stall_s):
                    return call.future
            else:
                self._running = True
                if deferred:
                    self._handoff, self._handoff_since = call.future, time.monotonic()
                    call.future.run_first(self._run_handoff)
                    return call.future
        self._drain()
        return call.future

    def rescue(self, stalled_s: float | None = None) -> bool:
        """Run the queue here if a deferred future has held it for ``stalled_s`` (default: the runner's
        ``stall_s``) without being consumed. The scheduler's maintenance thread calls this, so a queue stalls for
        at most one tick even when no other call arrives. True if this thread ran it."""
        with self._lock:
            if not self._claim_stalled(self._stall_s if stalled_s is None else stalled_s):
                return False
        self._drain()
        return True

    def _claim_stalled(self, stalled_s: float) -> bool:
        """Under the lock: take the queue over from a handed-off future not consumed for ``stalled_s``."""
        if self._handoff is None or time.monotonic() - self._handoff_since < stalled_s:
            return False
        self._handoff = None
        return True

    def _run_handoff(self) -> None:
        """The work a deferred future runs first: the queue, unless a rescuer has taken it over meanwhile."""
        with self._lock:
            if self._handoff is None:
                return
            self._handoff = None
        self._drain()

    def wait(self, future: Pending[Any]) -> Any:
        """``future.result()`` for a caller that blocks on its own call: it rescues the queue while it waits, so
        a handed-off future that is never consumed cannot hold this caller for ever."""
        while True:
            try:
                error = future.exception(self._stall_s)
            except TimeoutError:
                self.rescue()
                continue
            if error is not None:
                raise error
            return future.result()

    def close(self) -> None:
        """Refuse new calls and wait until the ones already queued have run."""
        with self._state:
            self._closed = True
        self.rescue(0.0)
        with self._state:
            self._state.wait_for(lambda: not self._running)

    def _drain(self) -> None:
        while True:
            with self._lock:
                calls, self._queue = self._queue, []
                if not calls:
                    self._running = False
                    if self._closed:
                        self._state.notify_all()
                    return
            try:
                self._run(calls)
            except BaseException:
                with self._state:  # only a dying thread gets here; let the next submit run the queue
                    self._running = False
                    self._state.notify_all()
                raise

    def _run(self, calls: list[GroupCall]) -> None:
        try:
            self._run_group(calls)
        except Exception as exc:  # the core sets each call's outcome itself; this would be a bug
            for call in calls:
                if call.error is None:
                    call.error = exc
        durable = []
        for call in calls:
            if call.error is not None:
                call.future.set_exception(call.error)
            elif call.durable:
                durable.append(call)
            else:
                call.future.set_result(call.result)
        if not durable:
            return
        try:
            self._sync()
        except Exception as exc:
            for call in durable:
                call.future.set_exception(exc)
            return
        for call in durable:
            call.future.set_result(call.result)

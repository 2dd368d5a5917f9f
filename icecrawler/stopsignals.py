"""SIGTERM and SIGINT as a request to stop in order, for the commands that serve until stopped; SIGHUP as a reload.

A daemon gets its handlers from ``stop_on_signals`` once it has built what it serves. Before that (Python's start,
the imports, a client loading jieba's dictionary, a scheduler opening and checking its database) the default
action would end the process in the middle of its start-up, with exit status -15 instead of 0: what a supervisor
that stops a just-started daemon saw. ``holding_stop_signals``, entered first thing by such a command, only
remembers the signal; ``stop_on_signals`` then stops at once. SIGHUP is held the same way and becomes a reload
once the daemon serves: ``systemctl reload`` of a unit that systemd already counts as started (``Type=simple``)
killed a scheduler still opening its database, and systemd takes a death by SIGHUP for a clean exit, so
``Restart=on-failure`` did not start it again. Nothing here imports Ice, so the hold costs nothing.
"""

from __future__ import annotations

import logging
import queue
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["held_stop", "holding_stop_signals", "parent_gone", "stop_on_signals"]

log = logging.getLogger(__name__)

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: What ``holding_stop_signals`` holds: the reload and the stop signals (SIGHUP's handler first, so that a daemon
#: seen catching SIGTERM already catches SIGHUP).
_HELD_SIGNALS = (signal.SIGHUP, *_STOP_SIGNALS)
#: Signals that came inside ``holding_stop_signals`` and before ``stop_on_signals``.
_held: list[int] = []
#: Whether SIGHUP was ignored when ``holding_stop_signals`` began (``nohup``): inside the hold its handler is ours.
_hup_ignored = False


#: Set once the process that started this one is gone (``icecrawler.processes``, IceGrid servers): the stop that
#: follows must leave the IceGrid registry's record of this server alone, which the next node's server now owns.
parent_gone = threading.Event()


def held_stop(reloads: bool = True) -> int | None:
    """The stop signal that came during the start-up (inside ``holding_stop_signals``), if one did: a daemon then
    stops before it goes online. A held SIGHUP counts for a daemon that has nothing to reload (``reloads`` false),
    as ``stop_on_signals`` would stop it a moment later, unless the process ignores SIGHUP (``nohup``)."""
    return next((signum for signum in _held if _stops(signum, reloads)), None)


def _stops(signum: int, reloads: bool) -> bool:
    """Whether ``signum`` stops a daemon that does (``reloads``) or does not reload on SIGHUP."""
    return signum in _STOP_SIGNALS or (not reloads and not _ignores_hup())


def _ignores_hup() -> bool:
    """Whether this process was started ignoring SIGHUP (``nohup``): a daemon with nothing to reload then keeps
    ignoring it, so a client started with nohup outlives its terminal as it did before SIGHUP was handled at all.
    A daemon that reloads takes SIGHUP whatever (``systemctl reload``, ``kill -HUP`` after editing the accounts)."""
    return _hup_ignored or signal.getsignal(signal.SIGHUP) == signal.SIG_IGN


def _remember(signum: int, _frame: Any) -> None:
    _held.append(signum)


@contextmanager
def holding_stop_signals() -> Iterator[None]:
    """Inside the block SIGTERM/SIGINT/SIGHUP are remembered instead of ending the process, until
    ``stop_on_signals`` acts on them; after it the previous handlers are back (a command run in-process, as the
    tests run them, leaves no handler behind: a forked worker pool that inherited one would ignore its own
    SIGTERM)."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    global _hup_ignored
    parent_gone.clear()  # a new command's start-up (the tests run several in one process); set by its own watch
    # SIGHUP is held even under nohup: which daemon this is (one that reloads or not) is known only later.
    _hup_ignored = signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    previous = {sig: signal.signal(sig, _remember) for sig in _HELD_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _held.clear()
        _hup_ignored = False


@contextmanager
def stop_on_signals(stop: threading.Event, on_reload: Callable[[], None] | None = None) -> Iterator[None]:
    """Inside the block SIGTERM/SIGINT set ``stop`` (and are logged) instead of ending the process, so a daemon
    can shut down in order, and SIGHUP runs ``on_reload`` (``systemctl reload``), or, for a daemon with nothing to
    reload, stops it in order too (a terminal's hang-up, where the default action ended it with buffered work; one
    started ignoring SIGHUP, under ``nohup``, keeps ignoring it); the
    previous handlers are back after the block. A stop signal held by ``holding_stop_signals`` sets ``stop`` at
    once; a SIGHUP held there runs ``on_reload`` once now (the start-up may have read what it reloads before the
    signal came).

    The handler only queues the signal (``SimpleQueue.put`` may be called from a signal handler) and a watcher
    thread logs it and sets ``stop`` or reloads. Setting the event in the handler could deadlock: the handler runs
    in the main thread, which may be inside ``stop.wait()`` holding the event's own lock. A reload that fails is
    logged with its traceback and the daemon serves on."""
    signals: queue.SimpleQueue[int | None] = queue.SimpleQueue()

    def _watch() -> None:
        while (signum := signals.get()) is not None:
            if signum == signal.SIGHUP and on_reload is not None:
                log.info("signal %d: reloading", signum)
                try:
                    on_reload()
                except Exception:
                    log.exception("reload failed; serving on as before")
                continue
            log.info("signal %d: shutting down", signum)
            stop.set()

    def _queue(signum: int, _frame: Any) -> None:
        signals.put(signum)

    watcher = threading.Thread(target=_watch, name="signals", daemon=True)
    watcher.start()
    reloads = on_reload is not None
    ignore_hup = not reloads and _ignores_hup()
    # SIGHUP first, as in the hold: once SIGTERM is seen caught here, no signal goes to the hold's list any more.
    previous = {signal.SIGHUP: signal.signal(signal.SIGHUP, signal.SIG_IGN if ignore_hup else _queue)}
    previous.update({sig: signal.signal(sig, _queue) for sig in _STOP_SIGNALS})
    stops = [signum for signum in _held if _stops(signum, reloads)]
    if stops:
        log.info("signal %d during start-up: shutting down", stops[0])
        stop.set()
    elif reloads and signal.SIGHUP in _held:
        log.info("signal %d during start-up: reloading now", signal.SIGHUP)
        signals.put(signal.SIGHUP)
    _held.clear()
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        signals.put(None)
        watcher.join()

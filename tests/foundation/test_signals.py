"""SIGTERM/SIGINT stop a daemon in order (``rpc.stop_on_signals``), with real signals in a child process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.foundation.test_docs import REPO

#: The child: its main thread holds the stop event's own lock (as it does inside ``stop.wait()``) when SIGTERM
#: comes, then waits for the event as a daemon's main loop does. A handler that set the event itself would wait
#: for that lock forever.
CHILD = textwrap.dedent(
    """
    import os, signal, threading
    from icecrawler.rpc import stop_on_signals

    stop = threading.Event()
    with stop_on_signals(stop):
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(10), "plain SIGTERM did not set stop"
        stop.clear()
        with stop._cond:  # CPython's Event keeps its flag under this lock
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # let the handler run while the lock is held
                pass
        assert stop.wait(10), "SIGTERM while the event's lock was held did not set stop"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, "the previous handler is not back"
    print("stopped in order")
    """
)


def test_a_signal_sets_stop_even_while_the_main_thread_holds_the_events_lock() -> None:
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD], cwd=REPO, capture_output=True, text=True, timeout=30, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the child hung on SIGTERM (deadlock in the signal handler): {exc.stderr!r}") from None
    assert done.returncode == 0, done.stderr
    assert "stopped in order" in done.stdout

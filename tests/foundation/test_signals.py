"""SIGTERM/SIGINT stop a daemon in order (``icecrawler.stopsignals``), with real signals in a child process: while
it serves, and while it is still starting; SIGHUP during the start-up is a reload once the scheduler serves, and a
stop in order for a daemon with nothing to reload."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from icecrawler.processes import (
    PARENT_PID_ENV,
    STOP_WITH_PARENT_ENV,
    ManagedProcess,
    free_port,
    icecrawler_argv,
    wait_for_port,
)
from icecrawler_cli.cli import main
from tests.foundation.test_docs import REPO
from tests.helpers import poll_until, process_gone

#: The child: its main thread holds the stop event's own lock (as it does inside ``stop.wait()``) when SIGTERM
#: comes, then waits for the event as a daemon's main loop does. A handler that set the event itself would wait
#: for that lock forever.
CHILD = textwrap.dedent(
    """
    import os, signal, threading
    from icecrawler.stopsignals import stop_on_signals

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


@pytest.fixture(autouse=True)
def _hang_up_as_by_default() -> Iterator[None]:
    """The children these tests start inherit SIGHUP's disposition: a suite run under nohup would start them all
    ignoring it (the nohup test sets its own)."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)


def nowhere_conf(tmp_path: Path) -> Path:
    """A client's Ice file naming a scheduler and a storage server that nothing listens for (free loopback ports):
    the client starts and keeps asking, which is all these tests need of it."""
    conf = tmp_path / "client.conf"
    conf.write_text(
        f"Scheduler.Proxy=scheduler:tcp -h 127.0.0.1 -p {free_port()}\n"
        f"Storage.Proxy=storage:tcp -h 127.0.0.1 -p {free_port()}\n"
    )
    return conf


def test_a_signal_sets_stop_even_while_the_main_thread_holds_the_events_lock() -> None:
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD], cwd=REPO, capture_output=True, text=True, timeout=30, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the child hung on SIGTERM (deadlock in the signal handler): {exc.stderr!r}") from None
    assert done.returncode == 0, done.stderr
    assert "stopped in order" in done.stdout


def holds_sigterm_while_starting(pid: int) -> bool:
    """Whether process ``pid`` catches SIGTERM (SigCgt of /proc/PID/status) while it still runs one thread: a
    daemon's own handlers come with ``stop_on_signals``, which starts a watcher thread first, so this is the hold
    of the start-up."""
    try:
        status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    except OSError:
        return False
    caught = int(status["SigCgt"].strip(), 16) >> (signal.SIGTERM - 1) & 1
    return bool(caught) and status["Threads"].strip() == "1"


@contextlib.contextmanager
def in_start_up(argv: list[str], log: Path, what: str, **popen: Any) -> Iterator[subprocess.Popen[bytes]]:
    """A daemon started with its output in ``log``, handed over once it holds its signals while it still starts
    (the hold comes within the first tenth of a second, serving a second or more later); killed at the end if it
    still runs."""
    with log.open("wb") as out:
        child = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, **popen)
    try:
        held = poll_until(lambda: holds_sigterm_while_starting(child.pid), 30, 0.002)
        assert held, f"the {what} never held its signals while it started"
        yield child
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_during_a_daemons_start_up_stops_it_in_order(tmp_path: Path, signum: signal.Signals) -> None:
    """A client stopped while it is still starting (imports, jieba's dictionary): the signal is held until it
    serves, then it stops as from any SIGTERM, exit status 0; without the hold it died of the signal (-15). A
    SIGHUP (a terminal's hang-up; the client has nothing to reload) does the same: it died of it (-1)."""
    conf = nowhere_conf(tmp_path)
    log = tmp_path / "client.log"
    argv = icecrawler_argv("client", "--set", "metrics.client.port=0", f"--Ice.Config={conf}")
    with in_start_up(argv, log, "client") as child:
        child.send_signal(signum)
        code = child.wait(timeout=60)
    assert code == 0, log.read_text()[-3000:]
    assert f"signal {int(signum)} during start-up: shutting down" in log.read_text()


@pytest.mark.parametrize("nohup", [False, True], ids=["plain", "under-nohup"])
def test_sighup_during_the_schedulers_start_up_is_a_reload_once_it_serves(tmp_path: Path, nohup: bool) -> None:
    """``systemctl reload`` of the scheduler while it still starts (its unit is ``Type=simple``, so systemd counts it
    as started at once; on a big database the start-up takes minutes): the scheduler died of the SIGHUP, and
    systemd takes that death for a clean exit, so ``Restart=on-failure`` left the crawl without a scheduler. Now
    the signal is held and the accounts are read again once it serves; it then stops with exit status 0. Started
    under nohup (SIGHUP ignored) it reloads the same: the hold once left SIGHUP ignored, and the edit was lost."""
    accounts = tmp_path / "accounts"
    accounts.mkdir(mode=0o700)
    (accounts / "pool.toml").write_text('[[account]]\nid = "a1"\ncookies = "SUB=x"\n')
    (accounts / "pool.toml").chmod(0o600)
    port = free_port()
    conf = tmp_path / "scheduler.conf"
    conf.write_text(f"SchedulerAdapter.Endpoints=tcp -h 127.0.0.1 -p {port}\n")
    sets = [f"scheduler.db_dir={tmp_path / 'db'}", f"scheduler.accounts_dir={accounts}", "metrics.scheduler.port=0"]
    argv = icecrawler_argv("scheduler", *(f"--set={x}" for x in sets), f"--Ice.Config={conf}")
    log = tmp_path / "scheduler.log"
    ignoring = (lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN)) if nohup else None
    with in_start_up(argv, log, "scheduler", preexec_fn=ignoring) as child:
        child.send_signal(signal.SIGHUP)
        serving = poll_until(lambda: child.poll() is not None or "accounts reloaded" in log.read_text(), 60, 0.1)
        assert serving and child.poll() is None, f"exit status {child.poll()}:\n{log.read_text()[-3000:]}"
        wait_for_port("127.0.0.1", port, 30, alive=lambda: child.poll() is None)
        child.send_signal(signal.SIGTERM)
        code = child.wait(timeout=60)
    text = log.read_text()
    assert code == 0, text[-3000:]
    assert "signal 1 during start-up: reloading now" in text and "accounts reloaded" in text, text[-3000:]
    assert "Traceback" not in text, text[-3000:]


def test_a_daemon_command_run_in_process_leaves_the_signal_handlers_as_they_were() -> None:
    """A forked worker (a benchmark's pool) inherits the handlers: one left holding SIGTERM would never stop."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    with pytest.raises(SystemExit):
        main(["client", "--help"])
    assert main(["targets", "--hosts", ""]) == 2
    assert {sig: signal.getsignal(sig) for sig in before} == before


#: The parent: starts a client through ``ProcessGroup`` (as the demo, the benchmarks and the tests do), prints its
#: pid, then waits to be killed.
PARENT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from icecrawler.processes import ProcessGroup, icecrawler_argv

    group = ProcessGroup(Path(sys.argv[1]))
    client = group.start("client", icecrawler_argv("client", "--set", "metrics.client.port=0", sys.argv[2]))
    print(client.pid, flush=True)
    time.sleep(120)
    """
)


def test_a_daemon_whose_parent_is_killed_stops_in_order(tmp_path: Path) -> None:
    """kill -9 of whatever started a daemon through ``icecrawler.processes`` (the demo, a benchmark, a test): the
    daemon, in a session of its own, gets SIGTERM from the kernel and stops as from any SIGTERM. Before, it ran on
    for good."""
    conf = nowhere_conf(tmp_path)
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path / "logs"), f"--Ice.Config={conf}"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    log = tmp_path / "logs" / "client.log"
    try:
        assert poll_until(lambda: log.exists() and "started:" in log.read_text(), 60, 0.1), "the client never started"
        parent.kill()
        parent.wait(timeout=30)
        stopped = poll_until(lambda: process_gone(child), 30, 0.1)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        parent.stdout.close()
        if not process_gone(child):
            os.kill(child, signal.SIGKILL)
    text = log.read_text()
    assert stopped, f"the client outlived its parent:\n{text[-3000:]}"
    assert "signal 15: shutting down" in text and f":{child} stopped" in text, text[-3000:]
    assert "Traceback" not in text, text[-3000:]


def test_a_child_started_off_the_main_thread_inherits_no_parent_pid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that was itself started by a ManagedProcess but is no icecrawler command (so nothing popped the
    variable: a script, a test run) and starts a child from a worker thread must not hand that child its own
    parent's pid: the child would arm PDEATHSIG, and get SIGTERM when that worker thread ends."""
    monkeypatch.setenv(PARENT_PID_ENV, "1")
    started: list[ManagedProcess] = []
    code = f"import os; print(os.environ.get({PARENT_PID_ENV!r}, 'unset'))"
    thread = threading.Thread(
        target=lambda: started.append(ManagedProcess("env", [sys.executable, "-c", code], tmp_path / "env.log"))
    )
    thread.start()
    thread.join()
    assert started[0].popen.wait(30) == 0
    started[0].stop()
    assert (tmp_path / "env.log").read_text().split() == ["unset"]


#: A process between the test and a daemon (as an IceGrid node is): it passes its environment on, starts the
#: daemon from a worker thread, prints its pid, and lets that thread end once the daemon is up.
INTERMEDIARY = textwrap.dedent(
    """
    import subprocess, sys, threading, time
    from pathlib import Path

    log = Path(sys.argv[1])

    def start() -> None:
        with log.open("ab") as out:
            child = subprocess.Popen(sys.argv[2:], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        print(child.pid, flush=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and b"started:" not in log.read_bytes():
            time.sleep(0.1)

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    print("thread ended", flush=True)
    time.sleep(120)
    """
)


def test_a_daemon_started_by_a_thread_of_a_process_in_between_outlives_that_thread(tmp_path: Path) -> None:
    """Linux sends the parent-death signal when the *thread* that started a process ends. A daemon that a process in
    between started from one of its threads (with the variable in the environment it passed on) must not arm it:
    it got SIGTERM as soon as that thread ended, its parent still running."""
    conf = nowhere_conf(tmp_path)
    log = tmp_path / "client.log"
    argv = icecrawler_argv("client", "--set", "metrics.client.port=0", f"--Ice.Config={conf}")
    middle = subprocess.Popen(
        [sys.executable, "-c", INTERMEDIARY, str(log), *argv],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, PARENT_PID_ENV: str(os.getpid())},
    )
    assert middle.stdout is not None
    child = int(middle.stdout.readline())
    try:
        assert middle.stdout.readline().strip() == "thread ended"
        assert "started:" in log.read_text(), log.read_text()[-3000:]
        died = poll_until(lambda: process_gone(child), 5, 0.1)
    finally:
        middle.kill()
        middle.wait()
        middle.stdout.close()
        if not process_gone(child):
            os.kill(child, signal.SIGKILL)
    text = log.read_text()
    assert not died, f"the daemon stopped when the thread that started it ended:\n{text[-3000:]}"
    assert "signal 15" not in text, text[-3000:]


def descriptor_stop_with_parent() -> str:
    """The value the committed IceGrid descriptor gives ``ICECRAWLER_STOP_WITH_PARENT`` (one for every template)."""
    text = (REPO / "deploy" / "icegrid" / "icecrawler.xml").read_text()
    values = set(re.findall(rf"<env>{STOP_WITH_PARENT_ENV}=([^<]*)</env>", text))
    assert len(values) == 1, values
    return values.pop()


#: A node killed right after it started a server: names itself as the node's program does, starts the daemon with
#: the descriptor's variable, prints its pid and exits at once, before the daemon's first step.
SHORT_LIVED_NODE = textwrap.dedent(
    """
    import ctypes, os, subprocess, sys

    ctypes.CDLL(None).prctl(15, sys.argv[2].encode(), 0, 0, 0)  # PR_SET_NAME: /proc/PID/comm
    with open(sys.argv[1], "ab") as out:
        child = subprocess.Popen(sys.argv[3:], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    print(child.pid, flush=True)
    os._exit(0)
    """
)


def test_a_server_whose_node_died_before_its_first_step_stops_on_its_own(tmp_path: Path) -> None:
    """An IceGrid node killed (-9, restarted in a loop) a fraction of a second after it started a server: by the
    server's first step its parent was already init (or a subreaper), which it took for the node and watched for
    good; such servers ran on unsupervised (clients crawling twice under one worker id, a scheduler holding the
    data lock the next node's scheduler needs, which exited and was disabled). Now the server checks that its
    parent is the program the descriptor names, and starts nothing when it is not."""
    conf = nowhere_conf(tmp_path)
    log = tmp_path / "client.log"
    argv = icecrawler_argv("client", "--set", "metrics.client.port=0", f"--Ice.Config={conf}")
    node = subprocess.run(
        [sys.executable, "-c", SHORT_LIVED_NODE, str(log), "icegridnode", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, STOP_WITH_PARENT_ENV: descriptor_stop_with_parent()},
        check=True,
    )
    child = int(node.stdout)
    try:
        stopped = poll_until(lambda: process_gone(child), 60, 0.1)
    finally:
        if not process_gone(child):
            os.kill(child, signal.SIGKILL)
    text = log.read_text()
    assert stopped, f"the server outlived its node:\n{text[-3000:]}"
    assert "the icegridnode that started this one is gone already" in text, text[-3000:]
    # It started nothing: a server would have registered its endpoints as the next node's server, then taken them back.
    assert "started:" not in text and "Traceback" not in text, text[-3000:]


def test_a_client_started_under_nohup_outlives_a_hang_up(tmp_path: Path) -> None:
    """``nohup icecrawler client &`` starts the client with SIGHUP ignored, so that it outlives the terminal. Once
    the client handled SIGHUP itself (a stop in order, for a terminal's hang-up without nohup), it replaced that
    ignore and stopped when the terminal closed. It keeps ignoring it now; SIGTERM still stops it in order."""
    conf = nowhere_conf(tmp_path)
    log = tmp_path / "client.log"
    argv = icecrawler_argv("client", "--set", "metrics.client.port=0", f"--Ice.Config={conf}")
    nohup = lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN)  # noqa: E731 (what nohup does)
    with in_start_up(argv, log, "client", preexec_fn=nohup) as child:
        child.send_signal(signal.SIGHUP)  # during the start-up
        started = re.compile(r"client \S+ started")
        assert poll_until(lambda: bool(started.search(log.read_text())) or child.poll() is not None, 60, 0.05)
        child.send_signal(signal.SIGHUP)  # and while it serves
        assert not poll_until(lambda: child.poll() is not None, 3, 0.05), log.read_text()[-3000:]
        child.send_signal(signal.SIGTERM)
        code = child.wait(timeout=60)
    text = log.read_text()
    assert code == 0, text[-3000:]
    assert not re.search(rf"signal {int(signal.SIGHUP)}\b", text) and f"signal {int(signal.SIGTERM)}: " in text


def test_a_parent_whose_name_cannot_be_read_is_watched_not_taken_for_a_gone_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A node's name this server may not read (``hidepid``, the node running as another user) said "" and the
    server took its live node for a gone one: it exited 0 at once, and a node restarts such a server twice a second
    for ever. Unreadable is unknown now, and the parent pid is watched; "true"/"yes" mean what "1" does, and
    "0"/"false" switch the watch off instead of naming a program no node has."""
    from icecrawler import processes

    def unreadable(_path: Path) -> bytes:
        raise PermissionError(13, "Permission denied")

    started: list[str] = []

    class Recorder:
        """Stands in for the watch thread: records it instead of polling this test process's parent."""

        def __init__(self, *, target: object, name: str, daemon: bool) -> None:
            self.name = name

        def start(self) -> None:
            started.append(self.name)

    monkeypatch.setattr(processes.threading, "Thread", Recorder)
    with monkeypatch.context() as patch:
        patch.setattr(Path, "read_bytes", unreadable)
        assert processes._program(os.getppid()) is None
        assert processes._watch_parent("icegridnode") is True and started == ["parent-watch"]
    monkeypatch.setattr(processes, "_program", lambda _pid: "systemd")  # adopted by init: the node is gone
    assert processes._watch_parent("icegridnode") is False and started == ["parent-watch"]
    assert processes._watch_parent("true") is True and processes._watch_parent("yes") is True
    for off in ("0", "false"):
        monkeypatch.setenv(STOP_WITH_PARENT_ENV, off)
        assert processes.die_with_parent() is True and len(started) == 3  # no watch started for it


def test_a_sighup_held_by_the_storage_server_stops_it_before_it_listens(tmp_path: Path) -> None:
    """The storage server has nothing to reload: a SIGHUP during its start-up is a stop. It went online first
    (under IceGrid: registered its endpoints and took them back at once) and only then stopped."""
    port = free_port()
    conf = tmp_path / "storage.conf"
    conf.write_text(f"StorageAdapter.Endpoints=tcp -h 127.0.0.1 -p {port}\n")
    sets = [
        f"storage.embedded.path={tmp_path / 'store.sqlite3'}",
        f"storage.spool_dir={tmp_path / 'spool'}",
        "metrics.storage.port=0",
    ]
    argv = icecrawler_argv("storage", *(f"--set={x}" for x in sets), f"--Ice.Config={conf}")
    log = tmp_path / "storage.log"
    with in_start_up(argv, log, "storage server") as child:
        child.send_signal(signal.SIGHUP)
        code = child.wait(timeout=60)
    text = log.read_text()
    assert code == 0, text[-3000:]
    assert "signal 1 during start-up: shutting down before listening" in text, text[-3000:]
    assert "listening on" not in text, text[-3000:]

"""Starting and stopping daemons as child processes: used by ``icecrawler demo``, the end-to-end tests and
the benchmarks, so all of them clean up the same way (SIGTERM, then SIGKILL after a bound)."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType, TracebackType

from icecrawler import stopsignals
from icecrawler.errors import ServiceError

__all__ = [
    "ManagedProcess",
    "ProcessGroup",
    "cpu_seconds",
    "die_with_parent",
    "free_port",
    "how_it_ended",
    "icecrawler_argv",
    "interrupts_once",
    "poll_until",
    "wait_for_port",
]


def free_port(host: str = "127.0.0.1") -> int:
    """An unused TCP port on ``host`` (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_for_port(host: str, port: int, timeout_s: float = 20.0, alive: Callable[[], bool] | None = None) -> None:
    """Block until something accepts TCP connections on host:port, or raise ServiceError."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            raise ServiceError(f"process died before listening on {host}:{port}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.05)
    raise ServiceError(f"nothing listens on {host}:{port} after {timeout_s:.0f}s")


def poll_until(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.5) -> bool:
    """Poll ``predicate`` until true or ``timeout_s`` passes; returns its last value. Bounded by design: the one
    polling loop of the harness, the benchmarks and the tests (``tests/helpers.wait_for``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)


#: Set by ``ManagedProcess`` in its child's environment: the pid of the process that started it (``die_with_parent``).
PARENT_PID_ENV = "ICECRAWLER_PARENT_PID"
_PR_SET_PDEATHSIG = 1
#: Set by the IceGrid descriptor to the node's program name, ``icegridnode`` (or to 1: whatever started the process):
#: stop when the node that started this server dies (``die_with_parent``).
STOP_WITH_PARENT_ENV = "ICECRAWLER_STOP_WITH_PARENT"


def die_with_parent() -> bool:
    """Called first thing by every ``icecrawler`` command: if a ``ManagedProcess`` started this one, have Linux send
    it SIGTERM (an orderly stop, as from ``ProcessGroup.stop_all``) when that parent dies, also by ``kill -9``; with
    ``ICECRAWLER_STOP_WITH_PARENT`` (IceGrid servers) whatever started it (``_watch_parent``).
    Otherwise the daemons of a demo, a benchmark or a test killed that way would run on forever, each in a session
    of its own. The variable is taken out of the environment, so a process this one starts does not inherit it.
    False when the IceGrid node that started this process is gone already: the command must start nothing (a server
    would register its endpoints with the registry as the next node's own server, then take them back)."""
    program = os.environ.pop(STOP_WITH_PARENT_ENV, "")
    if program.lower() in ("0", "false", "no", "off"):  # the watch switched off, not a program named "0"
        program = ""
    if program and not _watch_parent(program):
        return False
    expected = os.environ.pop(PARENT_PID_ENV, "")
    if not expected.isdigit() or not sys.platform.startswith("linux"):
        return True
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
            return True
    except (OSError, AttributeError):
        return True
    if os.getppid() == int(expected):
        return True
    if not _exists(int(expected)):  # it died before the request was made (this process has a new parent already)
        os.kill(os.getpid(), signal.SIGTERM)
        return True
    # Another process stands between them (``timeout``, a node that starts servers from its threads): Linux would
    # signal this one when the *thread* of that process that started it ends, which says nothing of ``expected``.
    libc.prctl(_PR_SET_PDEATHSIG, 0, 0, 0, 0)
    return True


def _watch_parent(program: str) -> bool:
    """Stop this process (SIGTERM, its orderly stop) once the process that started it is gone: a thread polls the
    parent pid, which changes when the parent dies. For servers an ``icegridnode`` starts (the descriptor sets
    ``ICECRAWLER_STOP_WITH_PARENT=icegridnode``): the node starts them from a thread, so PR_SET_PDEATHSIG cannot tell
    when the node dies, and one killed with -9 would leave them running unsupervised, holding the data locks the
    servers that the next node starts need.

    ``program`` other than "1" names the parent's program (``/proc/PID/comm``): a node killed in the fraction of a
    second before this check (a node restarted in a loop) has already handed this process to init or to a
    subreaper, which a watch of the parent pid alone took for the node and watched for good. False then."""
    parent = os.getppid()
    if program.lower() not in ("1", "true", "yes"):
        actual = _program(parent)
        if actual is not None and actual != program[:15]:  # the kernel keeps 15 characters of the name
            logging.getLogger(__name__).warning(
                "the %s that started this one is gone already (its parent is now pid %d, %s): not starting. A node "
                "that runs under another program name needs %s=1 in the descriptor (a watch of the parent pid alone)",
                program,
                parent,
                actual,
                STOP_WITH_PARENT_ENV,
            )
            return False
    if parent <= 1:
        return True

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        logging.getLogger(__name__).warning("the process that started this one (pid %d) is gone: stopping", parent)
        stopsignals.parent_gone.set()
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
    return True


def _program(pid: int) -> str | None:
    """The program name of process ``pid`` (``/proc/PID/comm``), or None where /proc does not tell: not Linux, or
    a name this process may not read (``hidepid``, a node running as another user), which says nothing of whether
    the node is there; the caller then watches the parent pid alone."""
    try:
        return Path(f"/proc/{pid}/comm").read_bytes().decode(errors="replace").strip()
    except OSError:
        return None


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process so far, from /proc (0.0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def icecrawler_argv(*args: str) -> list[str]:
    """argv that runs the icecrawler CLI with this interpreter (works without the console script on PATH)."""
    return [sys.executable, "-m", "icecrawler_cli", *args]


def how_it_ended(returncode: int | None) -> str:
    """How a child process ended, from its return code (pure): ``exited with code 2``, ``was killed by SIGKILL``."""
    if returncode is None:
        return "is still running"
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        return f"was killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"was killed by signal {-returncode}"


class ManagedProcess:
    """One child process with its output in a log file; ``stop`` is bounded in time."""

    def __init__(
        self, name: str, argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_path.open("ab")
        # Linux signals a child when the *thread* that started it ends: only the main thread's children are asked to
        # die with it (die_with_parent).
        parent = {PARENT_PID_ENV: str(os.getpid())} if threading.current_thread() is threading.main_thread() else {}
        self.popen = subprocess.Popen(
            self.argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**{k: v for k, v in os.environ.items() if k != PARENT_PID_ENV}, **parent, **(env or {})},
            cwd=cwd,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill9(self) -> None:
        """Simulate a crash: SIGKILL, no clean-up."""
        with contextlib.suppress(ProcessLookupError):
            self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=10)

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM, wait up to ``timeout_s``, then SIGKILL. Returns the exit code."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill9()
        self._log.close()
        return self.popen.returncode

    def ended_line(self, when: str = "") -> str:
        """``NAME (pid N) exited with code 2[ WHEN]; its log: PATH``: what to say of a process that ended early."""
        when = f" {when}" if when else ""
        return (
            f"{self.name} (pid {self.pid}) {how_it_ended(self.popen.poll())}{when}; its log: {self.log_path.resolve()}"
        )

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@contextlib.contextmanager
def interrupts_once() -> Iterator[None]:
    """Inside the block Ctrl-C *or SIGTERM* raise KeyboardInterrupt once, and further ones are ignored while the
    processes stop. A command that starts daemons (the demo, a benchmark) needs both: SIGTERM's default ends the
    process without running ``finally`` blocks, and its children, each in a session of its own, would live on."""

    def handler(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    previous = (signal.signal(signal.SIGINT, handler), signal.signal(signal.SIGTERM, handler))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])


class ProcessGroup:
    """Processes stopped together, last started first, even on exceptions (``with ProcessGroup() as group``)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.processes: list[ManagedProcess] = []

    def start(
        self, name: str, argv: Sequence[str], env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> ManagedProcess:
        process = ManagedProcess(name, argv, self.log_dir / f"{name}.log", env=env, cwd=cwd)
        self.processes.append(process)
        return process

    def stop_all(self, timeout_s: float = 10.0) -> None:
        for process in reversed(self.processes):
            process.stop(timeout_s)

    def __enter__(self) -> ProcessGroup:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop_all()

    @contextlib.contextmanager
    def running(self, name: str, argv: Sequence[str], port: int, timeout_s: float = 30.0) -> Iterator[ManagedProcess]:
        """Start a daemon and wait until it listens on 127.0.0.1:port."""
        process = self.start(name, argv)
        try:
            wait_for_port("127.0.0.1", port, timeout_s, alive=process.alive)
        except ServiceError as exc:
            raise ServiceError(f"{name}: {exc}\n{process.log_tail()}") from exc
        yield process

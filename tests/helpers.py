"""Helpers shared by the tests, in one module: the one bounded wait (``wait_for``, on the harness's
``poll_until``), servers that drip their answer (``drip``, ``tarpit``) or never answer (``silent_name_server``), and
the checks of the end-to-end tests on top of ``icecrawler_local.stack`` (what the sandbox published vs what storage
holds, judged by ``icecrawler_local.oracle``; restarting a server), the trace files of the sandbox's trace tests
(``write_traces``), and the Ice timeouts no client test may wait out (``LONG_ICE_WAITS``)."""

from __future__ import annotations

import collections
import contextlib
import grp
import http.server
import io
import json
import os
import pwd
import shutil
import signal
import socketserver
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from icecrawler.processes import ManagedProcess, icecrawler_argv, poll_until, wait_for_port
from icecrawler_local.oracle import ItemKey, stored_index, truth_index
from icecrawler_local.stack import Stack
from sandbox.tracefile import Trace
from tests.requirements import skip_or_fail
from tests.scaleout.netlab import NetLab

__all__ = [
    "LONG_ICE_WAITS",
    "SHIPPED_LOGROTATE",
    "TRACE_T0",
    "ManualClock",
    "caught_up",
    "child_pids",
    "client_logs",
    "disk_space",
    "drip",
    "expected_keys",
    "interrupt_when_ready",
    "process_gone",
    "refused_start",
    "restart",
    "shipped_logrotate",
    "silent_name_server",
    "tarpit",
    "truncated_posts",
    "wait_for",
    "write_traces",
]

Keys = collections.Counter[ItemKey]

REPO = Path(__file__).resolve().parents[1]
#: The logrotate file deploy/ ships for the IceGrid node's output directory.
SHIPPED_LOGROTATE = REPO / "deploy" / "logrotate" / "icecrawler"
#: Ice timeouts of ten minutes (an invocation timeout and an idle check) for a client whose calls to a server that
#: stopped answering (SIGSTOP) a test must see ended by other means (``CallCutoff``), never by these.
LONG_ICE_WAITS = {"Ice.Default.InvocationTimeout": "600000", "Ice.Connection.Client.IdleTimeout": "600"}
#: The Ice object adapter of each daemon ``refused_start`` starts.
_ADAPTERS = {"scheduler": "SchedulerAdapter", "storage": "StorageAdapter"}


class ManualClock:
    """A clock (seconds, as ``time.monotonic``) that moves only when a test sets ``now``: for pure logic."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def drip(
    out: io.BufferedIOBase, answer: bytes, every_s: float, stop: threading.Event, sent: Callable[[], object]
) -> None:
    """Write ``answer`` one byte every ``every_s`` (a tarpit: each byte well within any read timeout), calling
    ``sent`` after each, until the answer ends, ``stop`` is set or the reader hangs up."""
    for byte in answer:
        if stop.wait(every_s):
            return
        try:
            out.write(bytes([byte]))
            out.flush()
        except OSError:  # the reader gave up and closed the connection
            return
        sent()


@contextlib.contextmanager
def tarpit(answer: bytes, every_s: float = 0.05) -> Iterator[tuple[int, Callable[[], int]]]:
    """A loopback TCP server that drips ``answer`` (``drip``) to every connection, whatever it is sent (a proxy's
    answer to CONNECT, as a tarpit would serve it). Yields (port, bytes dripped so far)."""
    sent = collections.Counter[str]()
    stop = threading.Event()

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            drip(self.wfile, answer, every_s, stop, lambda: sent.update(["bytes"]))  # type: ignore[arg-type]

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], lambda: sent["bytes"]
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


#: Reads every DNS query sent to 127.0.0.1:53 and answers none; prints a line per query.
_SILENT_NAME_SERVER = """
import socket
server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
server.bind(("127.0.0.1", 53))
print("listening", flush=True)
while True:
    server.recv(4096)
    print("query", flush=True)
"""


@dataclass
class SilentNameServer:
    """A network namespace whose resolver asks only a name server that never answers (a site's slow name servers,
    as a client sees them); ``run`` runs Python code inside it."""

    netns: str
    queries: Callable[[], int]

    def run(self, code: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        """``python -c code`` in the namespace, from the repository root, bounded at ``timeout_s``."""
        return subprocess.run(
            ["ip", "netns", "exec", self.netns, sys.executable, "-c", code],
            cwd=Path(__file__).resolve().parent.parent,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )


@contextlib.contextmanager
def serving_http(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """A threaded HTTP server on 127.0.0.1 answering with ``handler``: its base URL while the block runs, then
    shut down and its thread joined (bounded)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextlib.contextmanager
def silent_name_server(resolver_timeout_s: int = 20) -> Iterator[SilentNameServer]:
    """A namespace with its own loopback and its own resolv.conf (``ip netns exec`` mounts /etc/netns/NAME/ over
    /etc), the resolver waiting ``resolver_timeout_s`` for one attempt. Needs root, like ``NetLab``."""
    reason = NetLab.available()
    if reason is not None:
        skip_or_fail(f"NETWORK NAMESPACES UNAVAILABLE, the name-lookup test is not run: {reason}")
    netns = f"icx-dns-{os.getpid()}-{threading.get_ident() % 10_000}"
    etc = Path("/etc/netns") / netns
    subprocess.run(["ip", "netns", "add", netns], check=True, timeout=20)
    server: subprocess.Popen[str] | None = None
    counter: threading.Thread | None = None
    try:
        subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True, timeout=20)
        etc.mkdir(parents=True)
        (etc / "resolv.conf").write_text(f"nameserver 127.0.0.1\noptions timeout:{resolver_timeout_s} attempts:1\n")
        server = subprocess.Popen(
            ["ip", "netns", "exec", netns, sys.executable, "-c", _SILENT_NAME_SERVER],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "listening", "the silent name server did not start"
        seen = collections.Counter[str]()
        output = server.stdout

        def count() -> None:
            for line in output:
                seen.update([line.strip()])

        counter = threading.Thread(target=count, daemon=True)
        counter.start()
        yield SilentNameServer(netns, lambda: seen["query"])
    finally:
        if server is not None:
            server.kill()
            server.wait(10)
            if counter is not None:
                counter.join(10)  # the pipe's end: the counter stops reading it
            server.stdout.close()  # type: ignore[union-attr]
        subprocess.run(["ip", "netns", "del", netns], check=False, timeout=20)
        shutil.rmtree(etc, ignore_errors=True)


def record_fsyncs_and_renames(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Path]]:
    """From now on, ("fsync", path) and ("rename", source) in the order they happen; the real calls still run.
    For tests of what reaches the disk before a folder is published."""
    events: list[tuple[str, Path]] = []
    fsync, rename = os.fsync, Path.rename

    def recording_fsync(fd: int) -> None:
        events.append(("fsync", Path(os.readlink(f"/proc/self/fd/{fd}"))))
        fsync(fd)

    def recording_rename(self: Path, target: str | Path) -> Path:
        events.append(("rename", Path(self)))
        return rename(self, target)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(Path, "rename", recording_rename)
    return events


def salvage_killed_at(point: str, module: str, copy: str, run: str) -> str:
    """A script (argv: the path to recover, the repository) that runs ``run`` with ``module`` imported as
    ``integrity`` and SIGKILLs itself at ``point`` of its salvage: "moving", right after the first file went aside
    (renamed to a ``.damaged-`` name), or "copying", right after ``integrity.<copy>`` first returned."""
    return f"""
import os, pathlib, signal, sys
sys.path.insert(0, sys.argv[2])
import {module} as integrity
def die():
    os.kill(os.getpid(), signal.SIGKILL)
if {point!r} == "moving":
    rename = pathlib.Path.rename
    def rename_then_die(self, target):
        moved = rename(self, target)
        if ".damaged-" in str(target):
            die()
        return moved
    pathlib.Path.rename = rename_then_die
else:
    copy = integrity.{copy}
    def copy_then_die(*args):
        copy(*args)
        die()
    integrity.{copy} = copy_then_die
{run}
"""


#: Put before a script run by ``killed_midway(script, REPO, NAME, ...)``: the process SIGKILLs itself half way through
#: its first write to a file whose name starts with NAME (the file itself, or the ``.partial`` a whole-file write goes
#: through), once that half is in the file: a run killed while it writes that file.
DIE_MID_WRITE = """
import io, os, signal, sys
sys.path.insert(0, sys.argv[1])
_open = io.open
class _Torn:
    def __init__(self, file):
        self._file = file
    def write(self, data):
        self._file.write(data[: max(1, len(data) // 2)])
        self._file.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    def __getattr__(self, name):
        return getattr(self._file, name)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return self._file.__exit__(*exc)
def _open_torn(file, mode="r", *args, **kwargs):
    handle = _open(file, mode, *args, **kwargs)
    path = os.readlink(f"/proc/self/fd/{file}") if isinstance(file, int) else os.fspath(file)
    if any(flag in mode for flag in "wax+") and os.path.basename(path).startswith(sys.argv[2]):
        return _Torn(handle)
    return handle
io.open = _open_torn
"""


def killed_midway(script: str, *args: str) -> None:
    """Run ``python -c script *args``, a job that SIGKILLs itself at some step (bounded); fail unless it did."""
    killed = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr


def refused_as_half_rebuilt(start: Callable[[], object]) -> None:
    """``start()`` (a daemon's start-up checks) refuses, in one line, a database a stopped --recover left behind."""
    from icecrawler.errors import ServiceError

    with pytest.raises(ServiceError) as refused:
        start()
    text = str(refused.value)
    assert "half rebuilt" in text and "start with --recover again" in text and "\n" not in text, text


def process_gone(pid: int) -> bool:
    """The process no longer runs (it is absent, or a zombie nobody has reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def child_pids(pid: int) -> list[int]:
    """The running processes whose parent is ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it ended while we looked
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


@dataclass(frozen=True)
class Interrupted:
    returncode: int
    output: str
    #: The command's child processes when the signal was sent.
    children: list[int]
    #: Those still running after it ended (killed by ``interrupt_when_ready``, so that a failing test leaves none).
    left: list[int]
    #: The process that got the signal: the command, or the one ``victim`` picked.
    signalled: int = 0


def interrupt_when_ready(
    argv: list[str],
    ready: str,
    sig: signal.Signals,
    timeout_s: float = 120.0,
    victim: Callable[[str], int] | None = None,
) -> Interrupted:
    """Run ``argv`` (a command that starts daemons), send ``sig`` once a line of its output starts with ``ready``
    (to the command, or to the pid ``victim`` picks from the output so far: one of its daemons), and see which of
    its children outlive it. Every wait is bounded."""
    command = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    lines: list[str] = []
    children: list[int] = []
    signalled = 0
    try:
        assert command.stdout is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = command.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith(ready):
                break
        children = child_pids(command.pid)
        signalled = victim("".join(lines)) if victim else command.pid
        os.kill(signalled, sig)
        rest, _ = command.communicate(timeout=90)
        lines.append(rest)
    finally:
        if command.poll() is None:
            command.kill()
            command.wait(timeout=30)
        poll_until(lambda: all(process_gone(pid) for pid in children), 10.0, 0.1)  # the last ones may take a moment
        left = [pid for pid in children if not process_gone(pid)]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    return Interrupted(command.returncode, "".join(lines), children, left, signalled)


def disk_space(exposition: str, prefix: str) -> dict[str, tuple[float, float]]:
    """``dir`` -> (free bytes, size bytes) from a daemon's /metrics text (``<prefix>_disk_free_bytes`` and
    ``_disk_size_bytes``)."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, dict[str, float]] = collections.defaultdict(dict)
    for family in text_string_to_metric_families(exposition):
        for kind in ("free", "size"):
            if family.name == f"{prefix}_disk_{kind}_bytes":
                for sample in family.samples:
                    values[sample.labels["dir"]][kind] = sample.value
    return {name: (pair["free"], pair["size"]) for name, pair in values.items()}


def client_logs(clients: list[ManagedProcess]) -> str:
    return "\n".join(client.log_path.read_text(errors="replace") for client in clients)


def wait_for(
    condition: Callable[[], bool], failure: str | Callable[[], str], timeout_s: float = 60.0, interval_s: float = 0.5
) -> None:
    """Poll ``condition`` (bounded); fail the test with ``failure`` (a message, or a function that makes one
    only then, e.g. from the servers' state) if it never holds."""
    if not poll_until(condition, timeout_s, interval_s):
        message = failure() if callable(failure) else failure
        pytest.fail(f"{message} (waited {timeout_s:.0f}s)")


def expected_keys(stack: Stack, published_before_wall_ms: int) -> Keys:
    """Each published item's identity (a post shown on both Weibo sites counts once: it is one row)."""
    return collections.Counter({key for _, key in truth_index(stack.truth()["items"], published_before_wall_ms)})


def caught_up(stack: Stack, catch_up_s: float, timeout_s: float) -> tuple[Keys, Keys, Keys]:
    """Poll until every item published more than ``catch_up_s`` ago is stored (bounded by ``timeout_s``);
    returns (expected, stored, everything published so far) for the caller's assertions."""
    deadline = time.monotonic() + timeout_s
    while True:
        expected = expected_keys(stack, int((time.time() - catch_up_s) * 1000))
        stored = stored_index(stack.stored())
        if not (expected - stored) or time.monotonic() > deadline:
            return expected, stored, expected_keys(stack, int(time.time() * 1000) + 60_000)
        time.sleep(1.0)


def restart(stack: Stack, process: ManagedProcess, port: int) -> ManagedProcess:
    """Start a stopped server again with its own command line (same port, same data); returns the new one."""
    again = stack.group.start(f"{process.name}-again", process.argv)
    wait_for_port("127.0.0.1", port, 60, alive=again.alive)
    return again


def truncated_posts(stack: Stack) -> list[str]:
    """Ids of stored posts whose text is shorter than the published one (a long text never completed)."""
    conn = sqlite3.connect(f"file:{stack.sqlite_path}?mode=ro", uri=True, timeout=10)
    try:
        stored = {str(post_id): text for post_id, text in conn.execute("SELECT id, text FROM weibo")}
    finally:
        conn.close()
    return [
        str(item["id"])
        for item in stack.truth()["items"]
        if str(item["id"]) in stored
        and len("".join(stored[str(item["id"])].split())) < len("".join(str(item["text"]).split()))
    ]


def refused_start(role: str, tmp: Path, *args: str) -> str:
    """``icecrawler <role> args`` (``scheduler`` or ``storage``, on a port of its own) that must refuse to start:
    exit status 2, one ``error:`` line on stderr and no traceback. Returns that line."""
    conf = tmp / f"refused-{role}.conf"
    conf.write_text(f"{_ADAPTERS[role]}.Endpoints=tcp -h 127.0.0.1 -p 0\n")
    done = subprocess.run(
        icecrawler_argv(role, f"--Ice.Config={conf}", *args),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert done.returncode == 2 and len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    return errors[0]


def shipped_logrotate(log_dir: Path, work: Path) -> Callable[[], None]:
    """Debian's real logrotate on the shipped file (``SHIPPED_LOGROTATE``), its paths moved to ``log_dir`` and its
    user to this one (skipped where logrotate is not installed, failed on CI). Returns one forced rotation (its
    state file in ``work``), which must succeed; ``log_dir`` need not exist before the first."""
    logrotate = shutil.which("logrotate") or shutil.which("/usr/sbin/logrotate")
    if logrotate is None:
        skip_or_fail("logrotate is not installed (apt-get install logrotate)")
    user, group = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name
    config = work / "icecrawler.logrotate"
    config.write_text(
        SHIPPED_LOGROTATE.read_text()
        .replace("/var/log/icecrawler", str(log_dir))
        .replace("su icecrawler icecrawler", f"su {user} {group}")
    )

    def rotate() -> None:
        log_dir.chmod(0o755)  # logrotate refuses a directory others may write to
        done = subprocess.run(
            [str(logrotate), "--force", "--state", str(work / "logrotate.state"), str(config)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr

    return rotate


#: The first item of the trace tests' traces, unix seconds (only the gaps from it matter).
TRACE_T0 = 1_700_000_000.0


def write_traces(path: Path, traces: Iterable[Trace]) -> Path:
    """``traces`` as a trace file (one JSON line each), as a collection writes it."""
    lines = [json.dumps({"target": t.target, "source": t.source, "times": list(t.times)}) + "\n" for t in traces]
    path.write_text("".join(lines), encoding="utf-8")
    return path

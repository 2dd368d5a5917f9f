"""`icecrawler hbase start|stop|status`: idempotent start, a clear bounded failure with the log tail, and pid files
that survive a `kill -9` of the command and never name a stranger."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from icecrawler.errors import ServiceError
from icecrawler.processes import free_port
from icecrawler_local.hbase_local import LocalHBase
from tests.helpers import killed_midway, process_gone, wait_for

REPO = Path(__file__).resolve().parents[2]

# Runs LocalHBase(argv[2], java=argv[3]).start() and SIGKILLs itself as soon as the first JVM is started: the instant
# between starting a detached daemon and recording its pid.
KILLED_AFTER_SPAWN = """
import os, signal, subprocess, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from icecrawler.processes import free_port
from icecrawler_local.hbase_local import LocalHBase
run = subprocess.run
def run_then_die(argv, *args, **kwargs):
    done = run(argv, *args, **kwargs)
    if argv[0] == "sh":
        os.kill(os.getpid(), signal.SIGKILL)
    return done
subprocess.run = run_then_die
ports = {name: free_port() for name in ("thrift_port", "zookeeper_port", "master_port", "regionserver_port")}
LocalHBase(Path(sys.argv[2]), heap_mb=256, start_timeout_s=30.0, java=sys.argv[3], **ports).start()
"""


def _fake_hbase(root: Path, jvm: str) -> tuple[LocalHBase, Path]:
    """A LocalHBase under ``root`` whose jars are "present" (no Maven run) and whose java is the script ``jvm``."""
    lib = root / "lib"
    lib.mkdir(parents=True)
    for jar in ("hbase-server-0.jar", "hbase-thrift-0.jar"):
        (lib / jar).write_bytes(b"")
    java = root / "java"
    java.write_text(jvm)
    java.chmod(0o755)
    return _hbase_at(root, str(java)), java


def _hbase_at(root: Path, java: str) -> LocalHBase:
    """A LocalHBase under ``root`` on free ports, started with ``java``."""
    return LocalHBase(
        root,
        thrift_port=free_port(),
        zookeeper_port=free_port(),
        master_port=free_port(),
        regionserver_port=free_port(),
        heap_mb=256,
        start_timeout_s=30.0,
        java=java,
    )


def _ours(pid: int | None) -> None:
    """Stop a leftover fake JVM (a failed test must not leave it running)."""
    if pid is not None and not process_gone(pid):
        subprocess.run(["kill", "-9", str(pid)], check=False)


def test_a_start_killed_after_the_jvm_started_leaves_its_pid_for_stop(tmp_path: Path) -> None:
    """`icecrawler hbase start` killed -9 right after it started the master JVM: the JVM runs on, detached, and
    the next `status`/`stop` must find it (else it holds the ports forever and every later start fails)."""
    root = tmp_path / "hbase"
    # A "JVM" that runs until stopped and writes its pid where the test can find it, whatever the pid file says.
    hbase, java = _fake_hbase(
        root,
        f"#!{sys.executable}\nimport os, sys, time\n"
        f"open({str(tmp_path / 'jvm.pid')!r}, 'w').write(str(os.getpid()))\ntime.sleep(300)\n",
    )
    killed_midway(KILLED_AFTER_SPAWN, str(REPO), str(root), str(java))
    jvm = tmp_path / "jvm.pid"
    deadline = time.monotonic() + 30
    while not (jvm.exists() and jvm.read_text()) and time.monotonic() < deadline:  # created before it is written
        time.sleep(0.05)
    pid = int(jvm.read_text())
    try:
        assert hbase.status()["master_pid"] == pid
        assert hbase.stop(timeout_s=30.0) == "stopped master"
        assert process_gone(pid)
    finally:
        _ours(pid)


def test_a_stale_pid_file_never_makes_stop_signal_another_process(tmp_path: Path) -> None:
    """A JVM killed -9 leaves its pid file; the kernel may give that pid to any process later. stop and status must
    not take that process for the JVM (stop would SIGTERM it)."""
    hbase, _ = _fake_hbase(tmp_path, "#!/bin/sh\nexit 1\n")
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        (tmp_path / "master.pid").write_text(str(stranger.pid))
        assert hbase.status()["master_pid"] is None
        assert hbase.stop(timeout_s=5.0) == "HBase was not running"
        assert stranger.poll() is None
    finally:
        stranger.send_signal(signal.SIGKILL)
        stranger.wait(timeout=30)


@pytest.mark.hbase
def test_start_is_idempotent_and_status_reports_it(local_hbase: LocalHBase) -> None:
    began = time.monotonic()
    assert "already running" in local_hbase.start()
    assert time.monotonic() - began < local_hbase.start_timeout_s
    status = local_hbase.status()
    assert status["answering"] is True
    assert status["thrift"] == f"127.0.0.1:{local_hbase.thrift_port}"


def test_a_daemon_that_dies_fails_start_with_its_log_tail(tmp_path: Path) -> None:
    hbase, _ = _fake_hbase(tmp_path, "#!/bin/sh\necho 'Error: could not start the fake JVM' >&2\nexit 1\n")
    with pytest.raises(ServiceError) as caught:
        hbase.start()
    assert "exited during start-up" in str(caught.value)
    assert "could not start the fake JVM" in str(caught.value)
    assert (tmp_path / "conf" / "hbase-site.xml").read_text().count("127.0.0.1") >= 5
    assert "HBase was not running" in hbase.stop()


# A stand-in for Maven: copies the jars named in $JARS into -DoutputDirectory, one by one; with $DIE_AFTER set it is
# killed (kill -9) after copying that many, as a `kill -9` of the process group or a dropped download would stop it.
FAKE_MVN = """#!/bin/sh
for arg; do case "$arg" in -DoutputDirectory=*) out="${arg#-DoutputDirectory=}";; esac; done
mkdir -p "$out"
n=0
for jar in $JARS; do
    printf 'jar' >"$out/$jar"
    n=$((n + 1))
    if [ "$n" = "${DIE_AFTER:-}" ]; then kill -9 $$; fi
done
"""


def test_a_jar_copy_killed_half_way_is_done_again_at_the_next_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Maven killed after it copied the HBase jars but not their dependencies: the next start must copy them all
    again, not take the half-filled lib/ for a complete one (its JVMs would die on a missing class)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mvn").write_text(FAKE_MVN)
    (bin_dir / "mvn").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path('/usr/bin')}:{Path('/bin')}")
    monkeypatch.setenv("JARS", "hbase-server-1.jar hbase-thrift-1.jar hbase-common-1.jar")
    hbase = _hbase_at(tmp_path / "hbase", "/bin/false")
    monkeypatch.setenv("DIE_AFTER", "2")
    with pytest.raises(ServiceError, match="Maven failed"):
        hbase.ensure_jars()
    monkeypatch.delenv("DIE_AFTER")
    hbase.ensure_jars()
    assert sorted(jar.name for jar in hbase.lib_dir.iterdir()) == [
        "hbase-common-1.jar",
        "hbase-server-1.jar",
        "hbase-thrift-1.jar",
    ]
    assert sorted(path.name for path in hbase.root.iterdir()) == ["lib"]


# A stand-in for both JVMs: the Thrift one answers table calls (happybase's own Thrift definition) while the master
# runs and is not stopping, as the real Thrift server needs a live master. SIGTERM stops the Thrift one at once; the
# master marks itself stopping and exits only once the test creates ``master.may-exit`` (a real master takes seconds
# to flush and stop); the next master clears the mark. Both run in the HBase folder (``LocalHBase._spawn``), where
# the pid files are.
SLOW_STOPPING_JVM = """
import os, signal, sys, threading, time
master = "org.apache.hadoop.hbase.master.HMaster" in sys.argv

def stopping(*_):
    if not master:
        os._exit(0)
    open("master.stopping", "w").close()
    def exit_when_allowed():
        while not os.path.exists("master.may-exit"):
            time.sleep(0.05)
        os._exit(0)
    threading.Thread(target=exit_when_allowed, daemon=True).start()

signal.signal(signal.SIGTERM, stopping)
if master and os.path.exists("master.stopping"):
    os.remove("master.stopping")  # the master before this one stopped
if not master:
    import happybase  # noqa: F401  (loads the Hbase_thrift module)
    from Hbase_thrift import Hbase
    from thriftpy2.rpc import make_server

    class Tables:
        def getTableNames(self):
            pid = int(open("master.pid").read())
            os.kill(pid, 0)
            if os.path.exists("master.stopping"):
                raise OSError("the master is stopping")
            return []

    server = make_server(Hbase, Tables(), "127.0.0.1", int(sys.argv[sys.argv.index("-p") + 1]))
    threading.Thread(target=server.serve, daemon=True).start()
while True:
    time.sleep(1)
"""

# Runs LocalHBase(...).stop() and SIGKILLs itself right after it sent the master its SIGTERM: a stop killed while it
# waited for the master to go (argv: the repository, the HBase folder, java, the four ports).
KILLED_AFTER_MASTER_SIGTERM = """
import os, signal, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from icecrawler_local.hbase_local import LocalHBase
master_pid = int((Path(sys.argv[2]) / "master.pid").read_text())
kill = os.kill
def kill_then_die(pid, sig):
    kill(pid, sig)
    if pid == master_pid and sig == signal.SIGTERM:
        kill(os.getpid(), signal.SIGKILL)
os.kill = kill_then_die
ports = dict(zip(("thrift_port", "zookeeper_port", "master_port", "regionserver_port"), map(int, sys.argv[4:8])))
LocalHBase(Path(sys.argv[2]), heap_mb=256, start_timeout_s=30.0, java=sys.argv[3], **ports).stop()
"""


def test_a_start_after_a_stop_killed_while_the_master_was_stopping_starts_it_again(tmp_path: Path) -> None:
    """`icecrawler hbase stop` killed -9 after its SIGTERM to the master, which takes its time to stop, then
    `icecrawler hbase start`: the start found the master running and left it, and when the master then exited (as
    the killed stop had told it to) failed with "HBase master exited during start-up", stopping the Thrift server it
    had just started. The master it did not start, gone meanwhile, is started again, and HBase comes up."""
    root = tmp_path / "hbase"
    hbase, java = _fake_hbase(root, f"#!{sys.executable}\n" + SLOW_STOPPING_JVM)
    assert hbase.start().startswith("HBase up (started master, thrift")
    old_master = hbase.status()["master_pid"]
    assert isinstance(old_master, int)
    ports = [hbase.thrift_port, hbase.zookeeper_port, hbase.master_port, hbase.regionserver_port]
    try:
        killed_midway(KILLED_AFTER_MASTER_SIGTERM, str(REPO), str(root), str(java), *map(str, ports))
        # The master marks its stopping in its SIGTERM handler, which may run after the killed stop is gone.
        wait_for(lambda: (root / "master.stopping").exists(), "the old master never began to stop", timeout_s=30.0)
        assert hbase.status()["master_pid"] == old_master
        assert hbase.status()["thrift_pid"] is None and not hbase.answering()

        def let_the_old_master_go() -> None:  # once the start has started a Thrift server beside the stopping master
            while hbase.status()["thrift_pid"] is None:
                time.sleep(0.05)
            (root / "master.may-exit").touch()

        releaser = threading.Thread(target=let_the_old_master_go, daemon=True)
        releaser.start()
        assert hbase.start().startswith("HBase up")
        releaser.join(timeout=30)
        status = hbase.status()
        assert status["answering"] is True and status["master_pid"] not in (None, old_master), status
    finally:
        (root / "master.may-exit").touch()
        hbase.stop(timeout_s=30.0)
        _ours(old_master)

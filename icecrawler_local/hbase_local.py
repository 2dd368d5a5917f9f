"""The local standalone HBase + Thrift1 server behind ``icecrawler hbase start|stop|status``.

Assembled from Maven Central jars (``deploy/hbase/pom.xml``, copied into ``<hbase.dir>/lib`` once, cached in
``~/.m2``), configured from ``deploy/hbase/hbase-site.xml.in`` and run as two JVMs on OpenJDK 17:

* ``HMaster start`` in standalone mode: master, region server and ZooKeeper in one process, data on the local
  file system under ``<hbase.dir>/data``;
* ``ThriftServer -threadpool`` (buffered transport, binary protocol: what happybase speaks by default).

Both listen on 127.0.0.1 only, web UIs off. ``start`` is idempotent and bounded by ``hbase.start_timeout_s``: it
returns once a real table call works through happybase, or raises ``ServiceError`` with the log tail.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import happybase

from icecrawler import durable
from icecrawler.errors import ServiceError
from icecrawler.settings import Settings

__all__ = ["LocalHBase"]

DEPLOY_DIR = Path(__file__).resolve().parent.parent / "deploy" / "hbase"

#: What bin/hbase adds on JDK 11+ (HBase 2.6 bin/hbase ``add_jdk11_jvm_flags``), plus none of its own.
JDK17_FLAGS = (
    "-Dorg.apache.hbase.thirdparty.io.netty.tryReflectionSetAccessible=true",
    "--add-modules",
    "jdk.unsupported",
    *(
        f"--add-opens=java.base/{pkg}=ALL-UNNAMED"
        for pkg in (
            "java.io",
            "java.nio",
            "sun.nio.ch",
            "java.lang",
            "jdk.internal.ref",
            "java.lang.reflect",
            "java.util",
            "java.util.concurrent",
        )
    ),
    *(
        f"--add-exports={pkg}=ALL-UNNAMED"
        for pkg in (
            "java.base/jdk.internal.misc",
            "java.security.jgss/sun.security.krb5",
            "java.base/sun.net.dns",
            "java.base/sun.net.util",
        )
    ),
)
MASTER_CLASS = "org.apache.hadoop.hbase.master.HMaster"
THRIFT_CLASS = "org.apache.hadoop.hbase.thrift.ThriftServer"
#: Runs "$@" (a JVM) in the background, detached, and writes its pid to "$PID_FILE" through a rename (a reader never
#: sees half a pid) before it prints it: the shell runs in its own session, so it finishes this even when the
#: ``icecrawler hbase start`` that called it is killed meanwhile.
_SPAWN_SCRIPT = (
    '"$@" >>"$LOG" 2>&1 </dev/null & pid=$!; '
    'echo "$pid" >"$PID_FILE.partial" && mv -f "$PID_FILE.partial" "$PID_FILE" && echo "$pid"'
)
_JDK17_CANDIDATES = (
    "/usr/lib/jvm/java-17-openjdk-amd64",
    "/usr/lib/jvm/java-17-openjdk-arm64",
    "/usr/lib/jvm/openjdk-17",
)


@dataclass(frozen=True)
class _Daemon:
    name: str
    main_class: str
    args: tuple[str, ...]
    heap: str


class LocalHBase:
    """Start, probe and stop the two JVMs; all state (jars, conf, data, logs, pids) lives under ``root``."""

    def __init__(
        self,
        root: Path,
        *,
        thrift_port: int,
        zookeeper_port: int,
        master_port: int,
        regionserver_port: int,
        heap_mb: int,
        start_timeout_s: float,
        java: str = "",
    ) -> None:
        self.root = root.resolve()
        self.thrift_port = thrift_port
        self.zookeeper_port = zookeeper_port
        self.master_port = master_port
        self.regionserver_port = regionserver_port
        self.heap_mb = heap_mb
        self.start_timeout_s = start_timeout_s
        self.java = java or _find_java17()

    @classmethod
    def from_settings(cls, settings: Settings) -> LocalHBase:
        return cls(
            Path(settings.get_str("hbase.dir")),
            thrift_port=settings.get_int("hbase.thrift_port"),
            zookeeper_port=settings.get_int("hbase.zookeeper_port"),
            master_port=settings.get_int("hbase.master_port"),
            regionserver_port=settings.get_int("hbase.regionserver_port"),
            heap_mb=settings.get_int("hbase.heap_mb"),
            start_timeout_s=settings.get_float("hbase.start_timeout_s"),
            java=settings.get_str("hbase.java"),
        )

    # --- paths -------------------------------------------------------------------------------------------------

    @property
    def lib_dir(self) -> Path:
        return self.root / "lib"

    @property
    def conf_dir(self) -> Path:
        return self.root / "conf"

    @property
    def log_dir(self) -> Path:
        return self.root / "logs"

    def _pid_file(self, name: str) -> Path:
        return self.root / f"{name}.pid"

    def _daemons(self) -> tuple[_Daemon, _Daemon]:
        heap = f"-Xmx{self.heap_mb}m"
        thrift_heap = f"-Xmx{max(256, self.heap_mb // 4)}m"
        return (
            _Daemon("master", MASTER_CLASS, ("start",), heap),
            _Daemon(
                "thrift",
                THRIFT_CLASS,
                ("-b", "127.0.0.1", "-p", str(self.thrift_port), "--infoport", "-1", "-threadpool", "start"),
                thrift_heap,
            ),
        )

    # --- assembly ----------------------------------------------------------------------------------------------

    def ensure_jars(self) -> None:
        """Copy the jars from Maven (Central, through ~/.m2) into lib/ unless they are there already. Maven fills
        ``lib.partial``, renamed to lib/ once every jar is in it (and on disk): a copy that failed or was killed
        half way (a dropped download, ``kill -9``) is never taken for a complete lib/ at the next start, which would
        start JVMs that die on a missing class; it is copied again from the start."""
        if any(self.lib_dir.glob("hbase-server-*.jar")) and any(self.lib_dir.glob("hbase-thrift-*.jar")):
            return
        self.root.mkdir(parents=True, exist_ok=True)
        partial = self.lib_dir.with_name(self.lib_dir.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)  # what a stopped copy left
        argv = [
            "mvn",
            "-q",
            "-B",
            "-f",
            str(DEPLOY_DIR / "pom.xml"),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={partial}",
            "-DincludeScope=runtime",
        ]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ServiceError(f"cannot fetch the HBase jars with Maven: {exc}") from exc
        if done.returncode != 0:
            raise ServiceError(f"Maven failed to fetch the HBase jars:\n{(done.stdout + done.stderr)[-3000:]}")
        if not partial.is_dir():
            raise ServiceError(f"Maven reported success but copied no jars into {partial}")
        shutil.rmtree(self.lib_dir, ignore_errors=True)  # a lib/ without the HBase jars: not ours to keep
        durable.sync_tree(partial)
        durable.publish([(partial, self.lib_dir)])

    def write_conf(self) -> None:
        """hbase-site.xml from the template, plus the logging config."""
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        template = (DEPLOY_DIR / "hbase-site.xml.in").read_text()
        site = template
        for key, value in {
            "data_dir": str(self.root / "data"),
            "zookeeper_port": self.zookeeper_port,
            "master_port": self.master_port,
            "regionserver_port": self.regionserver_port,
        }.items():
            site = site.replace("{" + key + "}", str(value))
        (self.conf_dir / "hbase-site.xml").write_text(site)
        (self.conf_dir / "log4j2.properties").write_text((DEPLOY_DIR / "log4j2.properties").read_text())

    def _argv(self, daemon: _Daemon) -> list[str]:
        classpath = f"{self.conf_dir}:{self.lib_dir}/*"
        return [
            self.java,
            daemon.heap,
            "-XX:+UseG1GC",
            "-XX:ActiveProcessorCount=2",
            *JDK17_FLAGS,
            f"-Dlog4j2.configurationFile={self.conf_dir / 'log4j2.properties'}",
            "-Djava.util.logging.config.class=org.apache.hadoop.hbase.logging.JulToSlf4jInitializer",
            f"-Dhbase.log.dir={self.log_dir}",
            "-Djava.net.preferIPv4Stack=true",
            "-cp",
            classpath,
            daemon.main_class,
            *daemon.args,
        ]

    # --- processes ---------------------------------------------------------------------------------------------

    def _pid(self, name: str) -> int | None:
        """The pid of a running daemon we started (None if the pid file is missing or stale). A pid file outlives a
        JVM killed with ``kill -9``, and the kernel may give its pid to another process since: only a process whose
        command line names the daemon's main class is ours, so ``stop`` never signals a stranger."""
        try:
            pid = int(self._pid_file(name).read_text().strip())
        except (OSError, ValueError):
            return None
        main_class = {daemon.name: daemon.main_class for daemon in self._daemons()}[name]
        return pid if _alive(pid) and main_class in _cmdline(pid) else None

    def _spawn(self, daemon: _Daemon) -> int:
        """Start a JVM detached from us (reparented to init), so it outlives this command and is nobody's zombie.
        The detached shell writes the pid file itself, whole (renamed into place), before it returns: this command
        killed at any instant after the JVM started still leaves its pid where ``stop`` and ``start`` look."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"{daemon.name}.log"
        pid_file = self._pid_file(daemon.name)
        done = subprocess.run(
            ["sh", "-c", _SPAWN_SCRIPT, "sh", *self._argv(daemon)],
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
            start_new_session=True,
            env={
                **os.environ,
                "LOG": str(log),
                "PID_FILE": str(pid_file),
                "HADOOP_USER_NAME": os.environ.get("USER", "icecrawler"),
            },
        )
        return int(done.stdout.strip())

    def answering(self, timeout_s: float = 5.0) -> bool:
        """Whether a table call works through Thrift right now."""
        try:
            connection = happybase.Connection("127.0.0.1", self.thrift_port, timeout=int(timeout_s * 1000))
            try:
                connection.tables()
            finally:
                connection.close()
        except Exception:  # any failure means "not (yet) answering"
            return False
        return True

    def log_tail(self, lines: int = 40) -> str:
        parts = []
        for name in ("master", "thrift"):
            path = self.log_dir / f"{name}.log"
            with contextlib.suppress(OSError):
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path} (last {len(tail)} lines) ---\n" + "\n".join(tail))
        return "\n".join(parts)

    def start(self) -> str:
        """Start whatever is not running and wait until Thrift answers a table call. Returns what it did. A daemon
        that was running when the start began and exits while it waits (a ``stop`` killed after it sent its SIGTERM
        leaves one stopping) is started again; only one this start started that exits is a failed start."""
        if self.answering():
            return f"HBase already running (thrift 127.0.0.1:{self.thrift_port})"
        self.ensure_jars()
        self.write_conf()
        started = []
        for daemon in self._daemons():
            if self._pid(daemon.name) is None:
                self._spawn(daemon)
                started.append(daemon.name)
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.answering():
                return f"HBase up (started {', '.join(started) or 'nothing'}; thrift 127.0.0.1:{self.thrift_port})"
            for daemon in self._daemons():
                if self._pid(daemon.name) is None:
                    if daemon.name not in started:
                        # Running when this start began and gone since: it was on its way out (a stop killed after
                        # its SIGTERM, say), not a failed start-up of ours. Started now, like one that was not there.
                        self._spawn(daemon)
                        started.append(daemon.name)
                        continue
                    tail = self.log_tail()
                    self.stop(timeout_s=10.0)  # a failed start leaves no half of HBase running
                    raise ServiceError(f"HBase {daemon.name} exited during start-up\n{tail}")
            time.sleep(1.0)
        raise ServiceError(
            f"HBase did not answer on thrift port {self.thrift_port} within "
            f"{self.start_timeout_s:.0f}s (hbase.start_timeout_s)\n{self.log_tail()}"
        )

    def stop(self, timeout_s: float = 60.0) -> str:
        """SIGTERM Thrift, then the master (its shutdown hook stops the region server and flushes); SIGKILL
        whatever still runs after ``timeout_s``. (``HMaster stop`` would avoid WAL recovery at the next start,
        but on this JDK 17 / 2.6.1 set-up it did not return within a minute, while SIGTERM takes seconds.)"""
        stopped = []
        for name in ("thrift", "master"):
            pid = self._pid(name)
            if pid is not None:
                stopped.append(self._terminate(name, pid, timeout_s))
        return f"stopped {', '.join(stopped)}" if stopped else "HBase was not running"

    def kill9(self, names: tuple[str, ...] = ("thrift", "master")) -> str:
        """SIGKILL Thrift and the master at once (or only the daemons in ``names``): a crash, with no flush. The next
        ``start`` replays the write-ahead log, so every put HBase acknowledged is there again (what the storage
        server's acknowledgement relies on), and starts only what is not running."""
        killed: dict[str, int] = {}
        for name in names:
            pid = self._pid(name)
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                killed[name] = pid
        for name, pid in killed.items():
            self._wait_gone(name, pid, 30.0)
        return f"killed {', '.join(killed)}" if killed else "HBase was not running"

    def _wait_gone(self, name: str, pid: int, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) until ``pid`` is gone; drop its pid file once it is. Whether it is gone."""
        deadline = time.monotonic() + timeout_s
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(pid):
            return False
        self._pid_file(name).unlink(missing_ok=True)
        return True

    def _terminate(self, name: str, pid: int, timeout_s: float) -> str:
        """SIGTERM ``pid`` and wait for it; SIGKILL after ``timeout_s``. Returns what happened."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if self._wait_gone(name, pid, timeout_s):
            return name
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        self._pid_file(name).unlink(missing_ok=True)
        return f"{name} (killed after {timeout_s:.0f}s)"

    def status(self) -> dict[str, object]:
        """pids and whether Thrift answers."""
        return {
            "master_pid": self._pid("master"),
            "thrift_pid": self._pid("thrift"),
            "thrift": f"127.0.0.1:{self.thrift_port}",
            "answering": self.answering(),
        }


def _cmdline(pid: int) -> str:
    """The command line of ``pid``, arguments joined by spaces ("" when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _find_java17() -> str:
    """JDK 17 explicitly: newer JDKs on the machine cannot run Hadoop's security-manager code."""
    home = os.environ.get("JAVA_HOME", "")
    if home and "17" in home and Path(home, "bin", "java").exists():
        return str(Path(home, "bin", "java"))
    for candidate in _JDK17_CANDIDATES:
        if Path(candidate, "bin", "java").exists():
            return str(Path(candidate, "bin", "java"))
    return "java"

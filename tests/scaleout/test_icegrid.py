"""IceGrid deployment: a real registry and nodes (Debian zeroc-icegrid 3.7.8) run the committed descriptor
``deploy/icegrid/icecrawler.xml`` through ``deploy/icegrid/grid.sh``; a crawl runs against the sandbox, a third
node joins mid-crawl and gets a client with one ``server template instantiate`` (or the servers are killed with
SIGKILL mid-crawl and their nodes start them again), and at the end every sandbox item is stored exactly once.

Why: growing must mean adding nodes, never changing code or client configuration. The clients here know only
the locator and the well-known names ``scheduler``/``storage`` (the scheduler listens on a port the OS picks),
so the test also shows that servers' addresses are resolved through IceGrid. One storage replica only: the
embedded SQLite backend gives each replica its own file (see docs/DEPLOY.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import Ice
import pytest

from icecrawler.processes import ProcessGroup, free_port, icecrawler_argv, poll_until
from icecrawler.settings import Settings
from icecrawler_local.launcher import Cluster, Workload
from tests.foundation.test_signals import in_start_up
from tests.helpers import process_gone, shipped_logrotate
from tests.requirements import skip_or_fail

pytestmark = [pytest.mark.ice, pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
GRID = REPO / "deploy" / "icegrid" / "grid.sh"
MISSING = [tool for tool in ("icegridregistry", "icegridnode", "icegridadmin") if shutil.which(tool) is None]


class Grid:
    """``grid.sh`` on a private directory and port."""

    def __init__(self, directory: Path, port: int) -> None:
        self.directory = directory
        self.port = port
        self.locator = f"IceGrid/Locator:tcp -h 127.0.0.1 -p {port}"

    def run(self, *args: str, timeout: float = 90) -> str:
        # Servers run with this interpreter (the one running the tests), wherever its environment lives.
        result = subprocess.run(
            [str(GRID), args[0], "-d", str(self.directory), "-p", str(self.port), *args[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "ICECRAWLER_PYTHON": sys.executable},
        )
        assert result.returncode == 0, f"grid.sh {' '.join(args)}: {result.stdout}\n{result.stderr}"
        return result.stdout

    def admin(self, command: str) -> str:
        return self.run("admin", command).strip()

    def server_pids(self) -> list[int]:
        pids = []
        for server in self.admin("server list").split():
            with contextlib.suppress(AssertionError, ValueError):
                pids.append(int(self.admin(f"server pid {server}")))
        return pids


@pytest.fixture
def grid(tmp_path: Path) -> Iterator[Grid]:
    if MISSING:
        skip_or_fail(f"IceGrid tools missing: {', '.join(MISSING)} (apt-get install zeroc-icegrid zeroc-ice-utils)")
    grid = Grid(tmp_path / "grid", free_port())
    grid.run("up", "-n", "2")
    pids: list[int] = []
    try:
        yield grid
    finally:
        with contextlib.suppress(Exception):
            pids = grid.server_pids()
        grid.run("down")
        for pid in pids:  # a node stops its servers; this only catches one that outlived a killed node
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _active(grid: Grid, server: str) -> bool:
    """``server state`` says e.g. "active (pid = 123, enabled)"."""
    try:
        return grid.admin(f"server state {server}").startswith("active")
    except AssertionError:
        return False


def _crawl_under_way(grid: Grid, group: ProcessGroup, tmp_path: Path, workload: Workload) -> tuple[Cluster, list[str]]:
    """The descriptor deployed on the grid's two nodes, the workload seeded through the locator, and some (not all)
    of its items stored; returns the cluster (the oracle's view of the grid's store) and the locator option to
    probe the scheduler with."""
    cluster = Cluster(tmp_path / "work", group, workload)
    sandbox_port = free_port()
    # Slow pages and one fetch thread per client, so the crawl (about 120 requests) still runs ~30 s after
    # the first item is stored: long enough for what each test does mid-crawl.
    cluster.start_sandbox("127.0.0.1", sandbox_port, latency_ms=500)
    workdir = grid.directory / "work"
    workdir.mkdir(parents=True, exist_ok=True)
    # Every server reads ./icecrawler.toml in the descriptor's workdir; nothing in it names a server address.
    settings = {
        **cluster.sandbox_settings("127.0.0.1", sandbox_port),
        "client.progress_log_s": 2.0,
        "client.workers": 1,
        "client.batch": 1,
    }
    (workdir / "icecrawler.toml").write_text(
        "".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items())
    )
    grid.run("deploy", "scheduler_port=0")
    assert poll_until(lambda: _active(grid, "Scheduler"), 40), grid.admin("server list")
    assert poll_until(lambda: _active(grid, "Storage-1"), 40)

    # Clients, seed and probe only know the locator and the well-known object names.
    seed_conf = cluster.ice_config("seed", {"Scheduler.Proxy": "scheduler", "Ice.Default.Locator": grid.locator})
    seeded = subprocess.run(
        [sys.executable, "-m", "icecrawler_cli", "seed", *workload.seed_ids(), f"--Ice.Config={seed_conf}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert seeded.returncode == 0, seeded.stderr
    cluster.db_path = workdir / "var" / "storage" / "Storage-1.sqlite3"
    assert poll_until(lambda: cluster.stored_items() > 0, 60), grid.admin("server list")
    assert cluster.stored_items() < workload.items, "crawl finished before the test acted: make it slower"
    return cluster, ["--Ice.Default.Locator=" + grid.locator]


def _all_started_again(grid: Grid, killed: dict[str, int]) -> bool:
    """Whether every server of ``killed`` (server id -> the pid it had) is active again under another pid."""
    try:
        return all(
            _active(grid, server) and int(grid.admin(f"server pid {server}")) != pid for server, pid in killed.items()
        )
    except (AssertionError, ValueError):  # not started yet: no pid to read
        return False


def test_icegrid_crawl_with_a_node_added_mid_crawl(grid: Grid, tmp_path: Path) -> None:
    workload = Workload(jd_products=25, reviews_per_product=30, weibo_users=10, posts_per_user=20)
    with ProcessGroup(tmp_path / "logs") as group:
        cluster, probe = _crawl_under_way(grid, group, tmp_path, workload)
        # The crawl is under way (some, not all, items stored) when node3 joins.
        grid.run("node", "node3")
        grid.admin("server template instantiate icecrawler node3 CrawlerClient index=3")
        assert poll_until(lambda: _active(grid, "CrawlerClient-3"), 40)

        assert poll_until(lambda: not cluster.problems(), 80, 1.0), cluster.problems()
        info = cluster.probe("scheduler", extra=probe)
        assert info["stats"]["inflight"] == 0
        assert all(task["crawls"] >= 1 for task in info["tasks"].values())
        workers = {task["worker"] for task in info["tasks"].values()}
        # The client on the node that joined mid-crawl took part in it.
        assert "CrawlerClient-3" in workers, workers
        assert sorted(grid.admin("server list").split()) == [
            "CrawlerClient-1",
            "CrawlerClient-2",
            "CrawlerClient-3",
            "Scheduler",
            "Storage-1",
        ]


def test_icegrid_restarts_servers_killed_mid_crawl_and_the_crawl_loses_nothing(grid: Grid, tmp_path: Path) -> None:
    """kill -9 of the scheduler, the storage server and a client at once, under their nodes: ``activation="always"``
    starts each again (the scheduler on another port the OS picks), the clients find the new ones through the
    registry, and every item is still stored exactly once."""
    workload = Workload(jd_products=25, reviews_per_product=30, weibo_users=10, posts_per_user=20)
    with ProcessGroup(tmp_path / "logs") as group:
        cluster, probe = _crawl_under_way(grid, group, tmp_path, workload)
        victims = ("Scheduler", "Storage-1", "CrawlerClient-1")
        killed = {server: int(grid.admin(f"server pid {server}")) for server in victims}
        for pid in killed.values():
            os.kill(pid, signal.SIGKILL)

        assert poll_until(lambda: _all_started_again(grid, killed), 60), grid.admin("server list")
        # The killed client's tasks are crawled again only once its leases run out (scheduler.lease_s after they
        # were taken, up to the moment of the kill): the wait must outlast a lease, with room for the crawl after.
        lease_s = Settings().get_float("scheduler.lease_s")
        assert poll_until(lambda: not cluster.problems(), lease_s + 90, 1.0), cluster.problems()
        info = cluster.probe("scheduler", extra=probe)
        assert info["stats"]["inflight"] == 0
        assert all(task["crawls"] >= 1 for task in info["tasks"].values())


def test_icegrid_all_endpoints_over_tls(tmp_path: Path) -> None:
    """``grid.sh up -s CERTS``: registry, nodes, admin and (through ``protocol=ssl`` and the ``ssl_*`` variables
    of the descriptor) every server endpoint use TLS with certificates from ``icecrawler certs``. A located
    client with a certificate of our CA reaches the scheduler by its well-known name; one without is refused
    (already by the registry)."""
    if MISSING:
        skip_or_fail(f"IceGrid tools missing: {', '.join(MISSING)} (apt-get install zeroc-icegrid zeroc-ice-utils)")
    from icecrawler import rpc, tls

    certs = tmp_path / "certs"
    grid = Grid(tmp_path / "grid", free_port())
    grid.locator = grid.locator.replace(":tcp ", ":ssl ")
    grid.run("up", "-n", "1", "-s", str(certs))  # node1 only: the scheduler and storage, no clients
    pids: list[int] = []
    try:
        grid.run("deploy", "scheduler_port=0")
        assert poll_until(lambda: _active(grid, "Scheduler"), 60), grid.admin("server list")
        pids = grid.server_pids()
        endpoints = grid.admin("adapter endpoints Scheduler.SchedulerAdapter")
        # icegridadmin 3.7 prints an ssl endpoint opaquely (type 2 = ssl) unless it parses IceSSL endpoints.
        assert ("opaque -t 2" in endpoints or "ssl -h" in endpoints) and "tcp -h" not in endpoints, endpoints

        tls.issue(certs, "client-1", role="client")
        C = rpc.crawler()
        located = {"Ice.Default.Locator": grid.locator, "IceSSL.CAs": str(certs / tls.CA_CERT)}
        with rpc.communicator(
            (),
            {
                **located,
                "IceSSL.CertFile": str(certs / "client-1.pem"),
                "IceSSL.KeyFile": str(certs / "client-1-key.pem"),
            },
        ) as comm:
            assert C.SchedulerPrx(comm, "scheduler").stats().tasks == 0
        with (
            rpc.communicator((), located) as comm,
            pytest.raises((Ice.ConnectionLostException, Ice.ProtocolException, Ice.SecurityException)),
        ):
            C.SchedulerPrx(comm, "scheduler").stats()
    finally:
        with contextlib.suppress(Exception):
            pids = pids or grid.server_pids()
        grid.run("down")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_icegrid_scheduler_shards_found_by_their_adapters(grid: Grid, tmp_path: Path) -> None:
    """The descriptor's ``SchedulerShard`` template and ``scheduler_proxies`` variable: two shards in place of the
    Scheduler, found through the locator by adapter, each holding its own hosts' tasks; ``seed`` and ``status``
    route over them, and the grid's clients lease from both (their fetches fail: no site answers, which is fine)."""
    from icecrawler.shards import shard_of_host

    hosts = {"jd": f"127.0.0.1:{free_port()}", "ecshop": f"127.0.0.3:{free_port()}"}
    settings = {f"sources.{source}.base_url": f"http://{host}/{source}" for source, host in hosts.items()}
    workdir = grid.directory / "work"
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "icecrawler.toml").write_text(
        "".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items())
    )
    proxies = ";".join(f"scheduler@SchedulerShard-{index}.SchedulerAdapter" for index in (0, 1))
    grid.run("deploy", "scheduler_port=0", f"scheduler_proxies='{proxies}'")
    grid.admin("server remove Scheduler")
    for index in (0, 1):
        grid.admin(f"server template instantiate icecrawler node1 SchedulerShard index={index} shards=2")
    assert poll_until(lambda: _active(grid, "SchedulerShard-0") and _active(grid, "SchedulerShard-1"), 40), grid.admin(
        "server list"
    )

    conf = tmp_path / "located.conf"
    conf.write_text(f"Ice.Default.Locator={grid.locator}\nScheduler.Proxies={proxies}\n")

    def icecrawler(*args: str) -> str:
        sets = [f"--set={key}={value}" for key, value in settings.items()]
        done = subprocess.run(
            [sys.executable, "-m", "icecrawler_cli", *args, *sets, f"--Ice.Config={conf}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "reviews: 3 new of 3" in icecrawler("seed", "jd:1", "jd:2", "ecshop:3")
    expected = [0, 0]
    for source, count in (("jd", 2), ("ecshop", 1)):
        expected[shard_of_host(hosts[source], 2)] += count

    def by_shard() -> list[dict[str, int]]:
        return list(json.loads(icecrawler("status", "--json"))["scheduler"]["by_shard"])

    assert [shard["tasks"] for shard in by_shard()] == expected
    # The grid's clients (Scheduler.Proxies from the descriptor) lease from every shard that holds tasks and report.
    assert poll_until(lambda: all(s["done"] > 0 for s, n in zip(by_shard(), expected, strict=True) if n), 60), (
        by_shard()
    )


def test_icegrid_servers_stop_with_a_killed_node_and_start_again_under_the_next(grid: Grid, tmp_path: Path) -> None:
    """kill -9 of an ``icegridnode``: its servers stop too (nothing would supervise them any more), so the node
    started again in its place starts them afresh, instead of finding their data locked by orphans of the old one
    and disabling them (an orphan then runs unsupervised, and outlives ``grid.sh down``)."""
    workdir = grid.directory / "work"
    workdir.mkdir(parents=True, exist_ok=True)
    grid.run("deploy", "scheduler_port=0")
    servers = ("Scheduler", "Storage-1")
    assert poll_until(lambda: all(_active(grid, server) for server in servers), 60), grid.admin("server list")
    old = {server: int(grid.admin(f"server pid {server}")) for server in servers}
    try:
        os.kill(int((grid.directory / "node1.pid").read_text()), signal.SIGKILL)
        assert poll_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in old.values()), 20), (
            "servers of the killed node still run"
        )
        grid.run("node", "node1")

        assert poll_until(lambda: _all_started_again(grid, old), 60), grid.admin("server list")
    finally:
        for pid in old.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_icegrid_server_output_survives_the_shipped_logrotate(grid: Grid, tmp_path: Path) -> None:
    """deploy/logrotate/icecrawler empties each ``<server-id>.out`` in place (copytruncate), which is only sound if
    the server writes it in append mode: a writer at its own offset would leave a hole of NUL bytes as long as
    everything it wrote before. Here the node of deploy/icegrid/node.conf starts the real scheduler (its Ice runtime
    opens the file from the node's Ice.StdOut/StdErr), Debian's logrotate runs the shipped file on the node's output
    directory, and the scheduler's next line lands at the start of the emptied file."""
    output = grid.directory / "node1" / "output"
    rotate = shipped_logrotate(output, tmp_path)
    (grid.directory / "work").mkdir(parents=True, exist_ok=True)
    grid.run("deploy", "scheduler_port=0")
    assert poll_until(lambda: _active(grid, "Scheduler"), 60), grid.admin("server list")
    pid = int(grid.admin("server pid Scheduler"))
    live = output / "Scheduler.out"
    assert poll_until(lambda: live.exists() and b"scheduler:" in live.read_bytes(), 30), sorted(output.iterdir())
    for fd in (1, 2):  # stdout and stderr (IceGrid.Node.RedirectErrToOut): the one file, opened for appending
        assert os.readlink(f"/proc/{pid}/fd/{fd}") == str(live)
        flags = int(Path(f"/proc/{pid}/fdinfo/{fd}").read_text().split("flags:")[1].split()[0], 8)
        assert flags & os.O_APPEND, f"fd {fd} of the scheduler is not in append mode: {oct(flags)}"
    before = live.read_bytes()

    rotate()
    assert (output / "Scheduler.out.1").read_bytes().startswith(before)

    # A refused call makes the scheduler log a WARNING line (scheduler_server/refusals.py).
    conf = tmp_path / "located.conf"
    conf.write_text(f"Ice.Default.Locator={grid.locator}\nScheduler.Proxy=scheduler\n")
    refused = subprocess.run(
        [sys.executable, "-m", "icecrawler_cli", "hold", "no-such-host.example", "--for", "1h", f"--Ice.Config={conf}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0 and "no-such-host.example" in refused.stderr, refused.stderr
    assert poll_until(lambda: b"refused holdHost" in live.read_bytes(), 30), (refused.stderr, live.read_bytes()[-400:])
    body = live.read_bytes()
    assert b"\0" not in body, f"the scheduler went on writing at its old offset: {body[:80]!r}"
    # Emptied in place: what it held before went to the copy (above), none of it is left here.
    first = next(line for line in before.splitlines() if line.strip())
    assert first not in body, f"the live file was not emptied: {body[:200]!r}"
    assert _active(grid, "Scheduler") and int(grid.admin("server pid Scheduler")) == pid


class Registry:
    """Debian's ``icegridregistry`` with the shipped ``registry.conf``, on a free port, taking any adapter id
    (``DynamicRegistration``) and tracing its adapters: what a server registers with it is in its log."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.locator = f"IceGrid/Locator:tcp -h 127.0.0.1 -p {self.port}"
        (directory / "db").mkdir(parents=True)
        self.log = directory / "registry.log"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [
                    "icegridregistry",
                    f"--Ice.Config={GRID.parent / 'registry.conf'}",
                    f"--IceGrid.Registry.Client.Endpoints=tcp -h 127.0.0.1 -p {self.port}",
                    "--IceGrid.Registry.Server.Endpoints=tcp -h 127.0.0.1",
                    "--IceGrid.Registry.Internal.Endpoints=tcp -h 127.0.0.1",
                    f"--IceGrid.Registry.LMDB.Path={directory / 'db'}",
                    "--IceGrid.Registry.LMDB.MapSize=64",
                    "--IceGrid.Registry.DynamicRegistration=1",
                    "--IceGrid.Registry.Trace.Adapter=1",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        assert poll_until(lambda: self.admin("adapter list")[0] == 0, 30), self.log.read_text()

    def admin(self, command: str) -> tuple[int, str]:
        admin_conf = f"--Ice.Config={GRID.parent / 'admin.conf'}"
        done = subprocess.run(
            ["icegridadmin", admin_conf, f"--Ice.Default.Locator={self.locator}", "-e", command],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return done.returncode, done.stdout + done.stderr

    def storage_argv(self, adapter_id: str) -> list[str]:
        """A storage server (embedded store in the registry's directory) whose adapter registers as ``adapter_id``,
        as a server under a node does."""
        conf = self.directory / f"{adapter_id}.conf"
        conf.write_text(
            "StorageAdapter.Endpoints=tcp -h 127.0.0.1\n"
            f"StorageAdapter.AdapterId={adapter_id}\nIce.Default.Locator={self.locator}\n"
        )
        data = self.directory / adapter_id
        return icecrawler_argv(
            "storage",
            f"--set=storage.embedded.path={data / 'store.sqlite3'}",
            f"--set=storage.spool_dir={data / 'spool'}",
            "--set=metrics.storage.port=0",
            f"--Ice.Config={conf}",
        )

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    if MISSING:
        skip_or_fail(f"IceGrid tools missing: {', '.join(MISSING)} (apt-get install zeroc-icegrid zeroc-ice-utils)")
    running = Registry(tmp_path / "registry")
    try:
        yield running
    finally:
        running.stop()


#: A node that stays until the test kills it: names itself as Debian's node program does, starts the server with
#: the descriptor's ICECRAWLER_STOP_WITH_PARENT, prints its pid.
NODE = textwrap.dedent(
    """
    import ctypes, subprocess, sys, time

    ctypes.CDLL(None).prctl(15, b"icegridnode", 0, 0, 0)  # PR_SET_NAME
    with open(sys.argv[1], "ab") as out:
        child = subprocess.Popen(sys.argv[2:], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    print(child.pid, flush=True)
    time.sleep(300)
    """
)


def test_a_server_stopping_because_its_node_died_leaves_the_registrys_record_alone(
    registry: Registry, tmp_path: Path
) -> None:
    """A server whose node was killed stops on its own, but its adapter's record in the registry belongs by then to
    the server the next node started: taking its endpoints back (as any adapter does when it stops) made the next
    node take its own, running server for unregistered; it killed it 60 s later as an activation that never came
    (seen under a kill -9 loop of the nodes: a minute without a scheduler). Here the record must outlive the stop."""
    text = (REPO / "deploy" / "icegrid" / "icecrawler.xml").read_text()
    stop_with_parent = re.findall(r"<env>ICECRAWLER_STOP_WITH_PARENT=([^<]*)</env>", text)[0]
    log = tmp_path / "storage.log"
    node = subprocess.Popen(
        [sys.executable, "-c", NODE, str(log), *registry.storage_argv("orphaned-storage")],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "ICECRAWLER_STOP_WITH_PARENT": stop_with_parent},
    )
    assert node.stdout is not None
    server = int(node.stdout.readline())
    try:
        registered = poll_until(lambda: registry.admin("adapter endpoints orphaned-storage")[0] == 0, 60)
        assert registered, log.read_text()[-3000:]
        node.kill()
        node.wait()
        assert poll_until(lambda: process_gone(server), 60), log.read_text()[-3000:]
    finally:
        node.kill()
        node.wait()
        node.stdout.close()
        if not process_gone(server):
            os.kill(server, signal.SIGKILL)
    server_log = log.read_text()
    assert "is gone: stopping" in server_log and "Traceback" not in server_log, server_log[-3000:]
    code, endpoints = registry.admin("adapter endpoints orphaned-storage")
    assert code == 0 and "tcp -h 127.0.0.1" in endpoints, f"the stopping orphan took the record back: {endpoints}"


def test_a_server_stopped_during_its_start_up_never_registers(registry: Registry, tmp_path: Path) -> None:
    """SIGTERM while a server starts (an IceGrid node stopping it, or its node gone): it registered its endpoints
    when it went online and took them back at once; a node started meanwhile took that for its own server's
    activation (state Active with the other server's endpoints). Now it stops before going online."""
    log = tmp_path / "storage.log"
    with in_start_up(registry.storage_argv("stopped-storage"), log, "server") as child:
        child.send_signal(signal.SIGTERM)
        code = child.wait(timeout=60)
    text = log.read_text()
    assert code == 0 and "Traceback" not in text, text[-3000:]
    assert "stopped-storage" not in registry.log.read_text(), registry.log.read_text()[-3000:]
    assert "shutting down before listening" in text, text[-3000:]

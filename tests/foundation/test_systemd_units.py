"""The systemd units in deploy/systemd start this version's daemons: each unit's ExecStart is run as written, with
only the install paths moved under a temporary root (/opt/icecrawler, /etc/icecrawler, /var/lib/icecrawler) and the
shipped Ice property files given free loopback ports. A renamed option or setting breaks a unit silently on a real
machine; here it fails a test. Real daemons, real Ice, real Berkeley DB; for the IceGrid units, Debian's real
registry and node."""

from __future__ import annotations

import shlex
import shutil
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from icecrawler import rpc
from icecrawler.processes import ManagedProcess, ProcessGroup, free_port, icecrawler_argv, wait_for_port
from tests.helpers import wait_for
from tests.requirements import skip_or_fail
from tests.scheduler.daemon import REPO
from tests.scheduler.test_shards import TWO_HOSTS

pytestmark = [pytest.mark.ice, pytest.mark.bdb]

UNITS = REPO / "deploy" / "systemd"
BINARY = "/opt/icecrawler/.venv/bin/icecrawler"
C = rpc.crawler()


class Install:
    """A temporary root laid out as docs/DEPLOY.md installs icecrawler: settings and Ice files under etc/, state
    under var/ (the units' WorkingDirectory)."""

    def __init__(self, root: Path, settings: str) -> None:
        self.etc = root / "etc" / "icecrawler"
        self.var = root / "var" / "lib" / "icecrawler"
        self.log = root / "var" / "log" / "icecrawler"
        for folder in (self.etc, self.var, self.log):  # DEPLOY.md's `install -d`
            folder.mkdir(parents=True)
        (self.etc / "icecrawler.toml").write_text(settings)

    def ice_config(self, name: str, shipped: str, ports: dict[str, int]) -> None:
        """deploy/``shipped`` as ``name`` under etc/, its fixed ports (10000: scheduler, 10001: storage) replaced."""
        text = (REPO / "deploy" / shipped).read_text()
        for fixed, port in ports.items():
            text = text.replace(f"-p {fixed}", f"-p {port}")
        (self.etc / name).write_text(text)

    def moved(self, text: str) -> str:
        """``text`` with the install paths moved under this root."""
        return (
            text.replace("/etc/icecrawler", str(self.etc))
            .replace("/var/lib/icecrawler", str(self.var))
            .replace("/var/log/icecrawler", str(self.log))
        )

    def command(self, unit: str, instance: str = "") -> list[str]:
        """The unit's ExecStart, as systemd would run it for ``instance``, with the install paths moved here; the
        unit's ``StateDirectory=`` folders made first, as systemd makes them under /var/lib."""
        lines = [line.replace("%i", instance) for line in (UNITS / unit).read_text().splitlines()]
        for line in lines:
            if line.startswith("StateDirectory="):
                for folder in line.removeprefix("StateDirectory=").split():
                    (self.var.parent / folder).mkdir(parents=True, exist_ok=True)
        line = next(line for line in lines if line.startswith("ExecStart="))
        return [self.moved(word) for word in shlex.split(line.removeprefix("ExecStart="))]

    def argv(self, unit: str, instance: str = "") -> list[str]:
        """An icecrawler unit's ExecStart, run by this interpreter."""
        words = self.command(unit, instance)
        assert words[0] == BINARY, words
        return icecrawler_argv(*words[1:])


def stop_timeout_s(unit: str) -> float:
    """The unit's ``TimeoutStopSec``: how long systemd lets it stop before SIGKILL (its default, 90 s, if unset)."""
    for line in (UNITS / unit).read_text().splitlines():
        if line.startswith("TimeoutStopSec="):
            return float(line.removeprefix("TimeoutStopSec="))
    return 90.0


@contextmanager
def started(
    group: ProcessGroup, install: Install, unit: str, name: str, argv: list[str], port: int | None
) -> Iterator[ManagedProcess]:
    """One daemon of ``unit``, from the unit's working directory; stopped with SIGTERM (the units' KillSignal) on
    exit, and given the unit's own stop timeout (a loaded machine may need more than a few seconds)."""
    process = group.start(name, argv, cwd=install.var)
    if port is not None:
        wait_for_port("127.0.0.1", port, 60, alive=process.alive)
    yield process
    assert process.stop(stop_timeout_s(unit)) == 0, process.log_path.read_text()[-3000:]


def test_every_unit_that_runs_icecrawler_is_started_below() -> None:
    units = sorted(UNITS.glob("icecrawler*.service"))
    ours = [unit for unit in units if f"ExecStart={BINARY} " in unit.read_text()]
    assert {unit.name for unit in ours} == {
        "icecrawler-scheduler.service",
        "icecrawler-scheduler-shard@.service",
        "icecrawler-storage.service",
        "icecrawler-client@.service",
    }
    # What ``started`` runs them from, and where their relative default paths (var/...) land.
    assert all("\nWorkingDirectory=/var/lib/icecrawler\n" in unit.read_text() for unit in ours)
    # The rest run Debian's IceGrid, started by the last test below.
    assert {unit.name for unit in units} - {unit.name for unit in ours} == {
        "icecrawler-icegridregistry.service",
        "icecrawler-icegridnode.service",
    }


def test_every_unit_that_runs_crawl_processes_raises_their_file_limit() -> None:
    """A large client holds a session per (source, account) per worker: the usual soft limit of 1024 is close. The
    node's unit had none, so every server an IceGrid node started kept 1024 (its servers inherit the node's)."""
    runs_servers = [UNITS / name for name in ("icecrawler-icegridnode.service",)]
    ours = [unit for unit in sorted(UNITS.glob("icecrawler*.service")) if f"ExecStart={BINARY} " in unit.read_text()]
    assert ours and all("\nLimitNOFILE=65536\n" in unit.read_text() for unit in [*ours, *runs_servers])


def test_the_scheduler_storage_and_client_units_start_and_stop_cleanly(tmp_path: Path) -> None:
    ports = {"10000": free_port(), "10001": free_port()}
    metrics = {role: free_port() for role in ("scheduler", "storage", "client")}
    install = Install(
        tmp_path,
        "".join(f"[metrics.{role}]\nport = {port}\nport_span = 1\n" for role, port in metrics.items()),
    )
    install.ice_config("scheduler.conf", "scheduler.conf", ports)
    install.ice_config("storage.conf", "storage.conf", ports)
    install.ice_config("client.conf", "client.conf", ports)
    with ProcessGroup(tmp_path / "logs") as group:
        scheduler_argv = install.argv("icecrawler-scheduler.service")
        storage_argv = install.argv("icecrawler-storage.service")
        with (
            started(group, install, "icecrawler-scheduler.service", "scheduler", scheduler_argv, ports["10000"]),
            started(group, install, "icecrawler-storage.service", "storage", storage_argv, ports["10001"]),
        ):
            client_unit = "icecrawler-client@.service"
            with started(group, install, client_unit, "client-1", install.argv(client_unit, "1"), None) as client:
                for role, port in metrics.items():  # each role's /metrics, at the port its settings give
                    # Bounded wait, not a fixed sleep: a loaded machine takes seconds to import and connect.
                    wait_for_port("127.0.0.1", port, 60, alive=client.alive if role == "client" else None)
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
                        assert f"icecrawler_{role}_" in answer.read().decode(), role
                assert client.alive(), client.log_path.read_text()[-3000:]
            client_log = client.log_path.read_text()
    # The relative default paths land under the units' working directory.
    assert (install.var / "var" / "scheduler" / "tasks.db").is_file()
    assert (install.var / "var" / "storage").is_dir()
    assert "Traceback" not in client_log and "ERROR" not in client_log, client_log[-3000:]


def test_the_shard_template_runs_each_shard_on_its_own_database_and_endpoint(tmp_path: Path) -> None:
    settings = '[scheduler]\nshards = 2\npolicy = "fixed"\n[metrics.scheduler]\nport = 0\n' + "".join(
        f'[sources.{key.split("__")[1]}]\nbase_url = "{url}"\n' for key, url in TWO_HOSTS.items()
    )
    install = Install(tmp_path, settings)
    ports = [free_port(), free_port()]
    for shard, port in enumerate(ports):
        install.ice_config(f"scheduler-shard{shard}.conf", "scheduler.conf", {"10000": port})
    with ProcessGroup(tmp_path / "logs") as group:
        argvs = [install.argv("icecrawler-scheduler-shard@.service", str(shard)) for shard in (0, 1)]
        with (
            started(group, install, "icecrawler-scheduler-shard@.service", "shard-0", argvs[0], ports[0]),
            started(group, install, "icecrawler-scheduler-shard@.service", "shard-1", argvs[1], ports[1]),
            rpc.communicator() as communicator,
        ):
            shards = [C.SchedulerPrx(communicator, f"{rpc.SCHEDULER_IDENTITY}:tcp -h 127.0.0.1 -p {p}") for p in ports]
            # jd's host is shard 0's, ecshop's shard 1's (crc32 of the host, mod 2).
            assert shards[0].addUsers(["jd:1", "jd:2"], C.TaskKind.ProductReviews) == 2
            assert shards[1].addUsers(["ecshop:7"], C.TaskKind.ProductReviews) == 1
            with pytest.raises(C.InvalidArgument) as wrong:
                shards[0].addUsers(["ecshop:8"], C.TaskKind.ProductReviews)
            assert wrong.value.code == C.ErrorCode.WrongShard
            assert [shard.stats().tasks for shard in shards] == [2, 1]
    for shard in (0, 1):
        assert (install.var / f"shard{shard}" / "tasks.db").is_file()


def test_the_icegrid_units_run_a_registry_and_a_node_that_joins_it(tmp_path: Path) -> None:
    """The IceGrid units run Debian's icegridregistry and icegridnode on the shipped deploy/icegrid files (the
    registry's host and port and the install paths moved): the node, named after the machine as its unit names it,
    registers with the registry, icegridadmin sees it, and both stop cleanly on SIGTERM."""
    missing = [tool for tool in ("icegridregistry", "icegridnode", "icegridadmin") if shutil.which(tool) is None]
    if missing:
        skip_or_fail(f"ICEGRID NOT INSTALLED ({', '.join(missing)}): the IceGrid units are not run")
    port = free_port()
    install = Install(tmp_path, "")
    icegrid = install.etc / "icegrid"
    icegrid.mkdir()
    for name in ("registry.conf", "node.conf", "admin.conf"):
        text = (REPO / "deploy" / "icegrid" / name).read_text()
        text = text.replace("-h registry.example", "-h 127.0.0.1").replace("-p 4061", f"-p {port}")
        (icegrid / name).write_text(install.moved(text))
    node_name = socket.gethostname().split(".")[0]  # what `hostname -s` gives the node unit

    def nodes() -> str:
        admin = ["icegridadmin", f"--Ice.Config={icegrid / 'admin.conf'}", "-e", "node list"]
        return subprocess.run(admin, capture_output=True, text=True, timeout=30, check=False).stdout

    with ProcessGroup(tmp_path / "logs") as group:
        registry = install.command("icecrawler-icegridregistry.service")
        node_command = install.command("icecrawler-icegridnode.service")
        with (
            started(group, install, "icecrawler-icegridregistry.service", "registry", registry, port),
            started(group, install, "icecrawler-icegridnode.service", "node", node_command, None) as node,
        ):
            wait_for(
                lambda: node_name in nodes().split(),
                lambda: f"node {node_name} never joined the registry: {node.log_path.read_text()[-3000:]}",
                timeout_s=60,
            )
    assert (install.var / "registry").is_dir() and (install.var / "node").is_dir()


def test_the_shipped_settings_file_loads_and_pairs_the_backups() -> None:
    """deploy/icecrawler.toml, what every unit's --config names, is valid as shipped: it points the sources at the
    real sites and gives the scheduler and storage the same backup interval (a restore needs a matching pair)."""
    from icecrawler.settings import load_settings

    settings = load_settings(REPO / "deploy" / "icecrawler.toml", environ={})
    assert settings.source_of("scheduler.db_dir") == "file"
    assert settings.get_float("scheduler.backup_interval_s") == settings.get_float("storage.backup_interval_s")
    assert settings.get_int("scheduler.backup_keep") >= 2
    urls = {key: value for key, value in settings.include_sources().as_dict().items() if key.endswith(".base_url")}
    sandboxed = sorted(key for key, url in urls.items() if not url.startswith("https://"))
    assert urls and not sandboxed, f"give each source a [sources.<name>] table with its real site: {sandboxed}"
    for unit in ("icecrawler-scheduler.service", "icecrawler-storage.service", "icecrawler-client@.service"):
        assert "--config /etc/icecrawler/icecrawler.toml" in (UNITS / unit).read_text()

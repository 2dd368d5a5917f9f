"""Every bad start-up ends at once with exit code 2 and one line on stderr: no traceback, no hang, Ice's own
errors included. One subprocess per case, each case a row of ``CASES``.

Why these rows: each is a start-up that once printed a traceback, hung (the storage daemon on a port in use),
or started and failed later (``scheduler.lease_s=nan`` made every lease an UnknownException,
``maintenance_interval_s=0`` spun a core) or made something useless (``certs init --days 0``), or named a file
without saying what to check (IceSSL's "error loading SSL private key").
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from icecrawler.errors import InvalidArgumentError
from icecrawler.models import TaskKind, make_task_id, split_task_id
from icecrawler.processes import icecrawler_argv

#: A case: (command-line arguments given the case's work directory and a port something already listens on,
#: text the one error line must contain).
Case = tuple[Callable[[Path, int], list[str]], str]


def _sched(*extra: str) -> Callable[[Path, int], list[str]]:
    return lambda work, port: ["scheduler", "--set", f"scheduler.db_dir={work / 'db'}", *extra]


def _storage(*extra: str) -> Callable[[Path, int], list[str]]:
    return lambda work, port: [
        "storage",
        "--set",
        f"storage.embedded.path={work / 's.sqlite3'}",
        "--set",
        f"storage.spool_dir={work / 'spool'}",
        *extra,
    ]


CASES: dict[str, Case] = {
    "scheduler port in use": (
        lambda w, p: [*_sched()(w, p), "--listen", f"tcp -h 127.0.0.1 -p {p}"],
        "Address already in use",
    ),
    "storage port in use": (
        lambda w, p: [*_storage()(w, p), "--listen", f"tcp -h 127.0.0.1 -p {p}"],
        "Address already in use",
    ),
    "storage port in use, adapter's own thread pool": (
        lambda w, p: [*_storage()(w, p), f"--Ice.Config={w / 'own-pool.conf'}"],
        "Address already in use",
    ),
    "missing --Ice.Config file": (_sched("--Ice.Config=/nonexistent/scheduler.conf"), "/nonexistent/scheduler.conf"),
    "garbage endpoint on the command line": (_sched("--listen", "garbage endpoint"), "bad endpoints"),
    "garbage endpoint in the property file": (
        lambda w, p: [*_sched()(w, p), f"--Ice.Config={w / 'garbage.conf'}"],
        "bad endpoints",
    ),
    "Ice.MessageSizeMax=abc": (_sched("--Ice.MessageSizeMax=abc"), "Ice.MessageSizeMax"),
    "plain endpoint off loopback": (_sched("--listen", "tcp -h 0.0.0.0 -p 1"), "security.allow_insecure"),
    "binary TOML file": (lambda w, p: ["scheduler", "-c", str(w / "binary.toml")], "invalid TOML"),
    "directory as TOML file": (lambda w, p: ["scheduler", "-c", str(w)], "Is a directory"),
    "db_dir is a file": (lambda w, p: ["scheduler", "--set", f"scheduler.db_dir={w / 'a-file'}"], "not a directory"),
    "db_dir under a file": (
        lambda w, p: ["scheduler", "--set", f"scheduler.db_dir={w / 'a-file' / 'db'}"],
        "not a directory",
    ),
    "backup_dir is a file": (_sched("--set", "scheduler.backup_dir=/etc/hostname"), "scheduler.backup_dir"),
    "backup interval under a second": (
        _sched("--set", "scheduler.backup_dir=/tmp", "--set", "scheduler.backup_interval_s=0.5"),
        "scheduler.backup_interval_s",
    ),
    "no backup kept": (_sched("--set", "scheduler.backup_keep=0"), "scheduler.backup_keep"),
    "storage backup_dir is a file": (_storage("--set", "storage.backup_dir=/etc/hostname"), "storage.backup_dir"),
    "db_dir unwritable": (lambda w, p: ["scheduler", "--set", "scheduler.db_dir=/proc/icecrawler-db"], "cannot write"),
    "embedded.path is a directory": (
        lambda w, p: [*_storage()(w, p), "--set", f"storage.embedded.path={w}"],
        "not a file path",
    ),
    "embedded.path unwritable": (
        lambda w, p: [*_storage()(w, p), "--set", "storage.embedded.path=/proc/x/s.db"],
        "cannot write",
    ),
    "spool_dir is a file": (
        lambda w, p: [*_storage()(w, p), "--set", f"storage.spool_dir={w / 'a-file'}"],
        "not a directory",
    ),
    "lease_s=nan": (_sched("--set", "scheduler.lease_s=nan"), "finite"),
    "lease_s=inf": (_sched("--set", "scheduler.lease_s=inf"), "finite"),
    "maintenance_interval_s=0": (_sched("--set", "scheduler.maintenance_interval_s=0"), "must be > 0"),
    "host_spacing_s=nan": (_sched("--set", "scheduler.host_spacing_s=nan"), "finite"),
    "storage.batch_limit=0": (_storage("--set", "storage.batch_limit=0"), "must be >= 1"),
    "max_text_chars=-1": (_storage("--set", "storage.max_text_chars=-1"), "must be >= 1"),
    "write_timeout_s=-1": (_storage("--set", "storage.write_timeout_s=-1"), "must be > 0"),
    "write_timeout_s=nan": (_storage("--set", "storage.write_timeout_s=nan"), "finite"),
    "hbase.pool_size=0": (_storage("--set", "storage.hbase.pool_size=0"), "must be >= 1"),
    "export to an unwritable path": (
        lambda w, p: [
            "export",
            "--table",
            "weibo",
            "--set",
            f"storage.embedded.path={w / 'store.sqlite3'}",
            "-o",
            "/proc/icecrawler-export.jsonl",
        ],
        "/proc/icecrawler-export.jsonl",
    ),
    "export from a store that does not exist": (
        lambda w, p: ["export", "--table", "weibo", "--set", f"storage.embedded.path={w / 'typo.sqlite3'}"],
        "no store at",
    ),
    "a node key that is not its certificate's": (
        lambda w, p: [*_sched()(w, p), f"--Ice.Config={w / 'pki' / 'mismatched.conf'}"],
        "written together by `icecrawler certs issue`",
    ),
    "certs init --days 0": (lambda w, p: ["certs", "init", "--dir", str(w / "ca"), "--days", "0"], "--days"),
    "certs issue --days 0": (lambda w, p: ["certs", "issue", "n1", "--dir", str(w / "ca"), "--days", "0"], "--days"),
    # Past the year 9999, the last an X.509 certificate can end in: an OverflowError traceback before.
    "certs init --days 99999999": (
        lambda w, p: ["certs", "init", "--dir", str(w / "ca"), "--days", "99999999"],
        "year 9999",
    ),
    "certs issue --days 3000000": (
        lambda w, p: ["certs", "issue", "late", "--dir", str(w / "pki"), "--days", "3000000"],
        "year 9999",
    ),
}


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from storage_server.stores import SqliteStore

    base = tmp_path_factory.mktemp("startup")
    (base / "binary.toml").write_bytes(b"\x00\xff\xfe\x80 not toml")
    (base / "a-file").write_text("x")
    (base / "garbage.conf").write_text("SchedulerAdapter.Endpoints=tcp -h 127.0.0.1 -p notaport -x\n")
    SqliteStore(str(base / "store.sqlite3")).close()
    _mismatched_pki(base / "pki")
    return base


def _mismatched_pki(pki: Path) -> None:
    """A scheduler's TLS files with another node's key in place of its own (a re-issue stopped midway, a copy gone
    wrong): ``mismatched.conf`` starts it on an ssl endpoint with them."""
    from icecrawler import tls

    tls.init_ca(pki)
    files = tls.issue(pki, "sched")
    other = tls.issue(pki, "other")
    files.key.write_bytes(other.key.read_bytes())
    (pki / "mismatched.conf").write_text(
        files.properties.read_text() + "SchedulerAdapter.Endpoints=ssl -h 127.0.0.1 -p 0\n"
    )


@pytest.fixture(scope="module")
def taken_port(work: Path) -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = int(sock.getsockname()[1])
        (work / "own-pool.conf").write_text(
            f"StorageAdapter.Endpoints=tcp -h 127.0.0.1 -p {port}\n"
            "StorageAdapter.ThreadPool.Size=4\nStorageAdapter.ThreadPool.SizeMax=8\n"
        )
        yield port


@pytest.mark.parametrize("case", list(CASES))
def test_bad_start_up_is_one_line_and_exit_2(case: str, work: Path, taken_port: int) -> None:
    argv, expected = CASES[case]
    result = subprocess.run(
        icecrawler_argv(*argv(work, taken_port)), capture_output=True, text=True, timeout=60, cwd=work
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("icecrawler ") and ": error: " in lines[0], lines
    assert expected in lines[0], lines
    assert not (work / "typo.sqlite3").exists()  # a wrong export path created no empty store
    assert not (work / "ca" / "ca.pem").exists()  # --days 0 made no certificate


@pytest.mark.parametrize("bad", ["123\n", "123\r", " 123", "12 3", "", "x" * 65])
def test_ids_are_matched_in_full(bad: str) -> None:
    with pytest.raises(InvalidArgumentError):
        make_task_id(TaskKind.WeiboUser, "weibo_pc", bad)
    with pytest.raises(InvalidArgumentError):
        split_task_id(f"user:weibo_pc:{bad}")


def test_product_ids_are_matched_in_full() -> None:
    from icecrawler.models import Review
    from storage_server.schema import validate_review

    good = Review(
        id="r1",
        product_id="12",
        source="ecshop",
        user="u",
        content="c",
        score=5,
        created_at="2024-05-01T12:00:00+08:00",
        fetched_at="2024-05-01T12:00:00+08:00",
    )
    assert validate_review(good, 1000) == []
    bad = Review(**{**vars(good), "product_id": "12\n"})
    assert any("productId" in reason for reason in validate_review(bad, 1000))


def test_messages_quote_a_short_prefix_of_a_huge_argument() -> None:
    huge = "9" * 10_000_000
    with pytest.raises(InvalidArgumentError) as refused:
        make_task_id(TaskKind.WeiboUser, "weibo_pc", huge)
    assert len(str(refused.value)) < 200 and "10000000 chars" in str(refused.value)


def test_an_adapter_with_its_own_thread_pool_fails_to_bind_without_hanging(taken_port: int) -> None:
    """The race the port probe cannot close (taken between probe and bind): Ice's own bind error, at once."""
    code = (
        "from icecrawler import errors, rpc\n"
        f"props = {{'StorageAdapter.Endpoints': 'tcp -h 127.0.0.1 -p {taken_port}',\n"
        "         'StorageAdapter.ThreadPool.Size': '4', 'StorageAdapter.ThreadPool.SizeMax': '8'}\n"
        "with rpc.communicator((), props) as comm:\n"
        "    try:\n"
        "        rpc.create_adapter(comm, 'StorageAdapter')\n"
        "    except errors.ServiceError as exc:\n"
        "        print(exc)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "Address already in use" in result.stdout

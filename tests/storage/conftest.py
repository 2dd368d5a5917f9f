"""Fixtures of the storage tests: sample records, the real HBase (skip only outside CI), real storage servers."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from icecrawler import rpc
from icecrawler.models import Post, Review
from icecrawler.processes import ManagedProcess, free_port, icecrawler_argv, wait_for_port
from icecrawler.settings import load_settings
from icecrawler_local.hbase_local import LocalHBase
from tests.requirements import skip_or_fail

BIG_ID = (1 << 63) - 7  # far above 2**53: a float would round it
USER = 1_669_879_400


def make_post(post_id: int, user_id: int = USER, minute: int = 0, **changes: Any) -> Post:
    fields: dict[str, Any] = {
        "id": post_id,
        "user_id": user_id,
        "user_name": "微博用户_😀",
        "text": f"今天天气不错 #{post_id} 🌞",
        "html": f"<p>今天天气不错 <b>#{post_id}</b> 🌞</p>",
        "created_at": f"2024-05-01T12:{minute:02d}:00+08:00",
        "reposts": 3,
        "comments": 2,
        "likes": 1,
        "pinned": False,
        "retweeted_id": 0,
        "pictures": ["https://wx1.sinaimg.cn/large/a.jpg", "https://wx2.sinaimg.cn/large/b.jpg"],
        "permalink": f"https://weibo.com/{user_id}/{post_id}",
        "fetched_at": "2024-05-01T12:30:00+08:00",
        "source": "weibo_mobile",
    }
    fields.update(changes)
    return Post(**fields)


def make_review(review_id: str, product_id: str = "100012043978", minute: int = 0, **changes: Any) -> Review:
    fields: dict[str, Any] = {
        "id": review_id,
        "product_id": product_id,
        "source": "jd",
        "user": "j***5",
        "content": "质量很好，物流快 👍",
        "score": 5,
        "created_at": f"2024-05-01T12:{minute:02d}:00+08:00",
        "fetched_at": "2024-05-02T08:00:00+08:00",
    }
    fields.update(changes)
    return Review(**fields)


@pytest.fixture(scope="session")
def local_hbase() -> LocalHBase:
    """The local HBase that `icecrawler hbase start` runs (make test starts it before pytest), on the ports that
    command reads, ``ICECRAWLER_HBASE__*`` variables included (an HBase of one's own beside another's)."""
    hbase = LocalHBase.from_settings(load_settings())
    if not hbase.answering(timeout_s=10.0):
        message = (
            f"HBase Thrift is not answering on 127.0.0.1:{hbase.thrift_port}; "
            "run `icecrawler hbase start` (make test does)"
        )
        skip_or_fail("HBase tests: " + message)
    return hbase


@pytest.fixture
def table_prefix() -> str:
    """A fresh table namespace per test, so tests never see each other's rows."""
    return "t" + uuid.uuid4().hex[:10]


@pytest.fixture(scope="session")
def client_comm() -> Iterator[Any]:
    comm = rpc.communicator()
    yield comm
    comm.destroy()


class StorageServerRunner:
    """Starts ``icecrawler storage`` as a real child process on a free port; restartable, kill -9-able."""

    def __init__(self, tmp: Path, assignments: dict[str, str]) -> None:
        self.tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.conf = tmp / "storage.conf"
        self.conf.write_text(f"StorageAdapter.Endpoints=tcp -h 127.0.0.1 -p {self.port}\n")
        self.assignments = {
            "storage.embedded.path": str(tmp / "store.sqlite3"),
            "storage.spool_dir": str(tmp / "spool"),
            **assignments,
        }
        self.process: ManagedProcess | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        argv = icecrawler_argv(
            "storage",
            f"--Ice.Config={self.conf}",
            *(arg for key, value in self.assignments.items() for arg in ("--set", f"{key}={value}")),
        )
        self.process = ManagedProcess("storage", argv, self.tmp / f"storage-{self.starts}.log")
        try:
            wait_for_port("127.0.0.1", self.port, timeout_s=30.0, alive=self.process.alive)
        except Exception as exc:
            raise AssertionError(f"storage server did not start:\n{self.process.log_tail()}") from exc

    def proxy(self, comm: Any) -> Any:
        return rpc.crawler().StoragePrx(comm, f"storage:tcp -h 127.0.0.1 -p {self.port}")

    def kill9(self) -> None:
        """Crash the server: SIGKILL, no clean-up (then release our end of its log file)."""
        assert self.process is not None
        self.process.kill9()
        self.process.stop()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


@pytest.fixture
def storage_server(tmp_path: Path) -> Iterator[Callable[..., StorageServerRunner]]:
    """A factory: ``storage_server(**{"storage.backend": "hbase"})`` starts a server; all are stopped after."""
    runners: list[StorageServerRunner] = []

    def start(**assignments: str) -> StorageServerRunner:
        runner = StorageServerRunner(tmp_path / f"server{len(runners)}", {k: str(v) for k, v in assignments.items()})
        runners.append(runner)
        runner.start()
        return runner

    yield start
    for runner in runners:
        runner.stop()

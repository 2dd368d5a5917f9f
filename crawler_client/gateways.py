"""The client's two remote collaborators behind small Protocols, and their Ice implementations.

The lease loop and the sink (``crawler_client.daemon``, ``crawler_client.sink``) only see these Protocols and
core types; Slice types and Ice exceptions stop here. Errors a caller must handle:

* ``NoWorkError`` (lease), ``LeaseLostError`` / ``InvalidArgumentError`` with ``index`` (report, release),
  ``InvalidRecordsError`` (write: the other records WERE stored) — the servers' own answers;
* ``ServiceError`` — the server did not answer (connection refused, timeout, communicator gone) and
  ``StorageUnavailableError`` — storage answered but could not take the write. Both mean "keep it, retry later".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from icecrawler import rpc
from icecrawler.models import Post, Report, Review, Task, TaskKind

__all__ = ["IceScheduler", "IceStorage", "SchedulerGateway", "StorageGateway"]

class SchedulerGateway(Protocol):
    def lease(self, worker_id: str, count: int) -> list[Task]:
        """Lease up to ``count`` due tasks; raises NoWorkError when none is due."""
        ...

    def report(self, reports: Sequence[Report]) -> None:
        """All or nothing; LeaseLostError/InvalidArgumentError name the offending ``index``."""
        ...

    def release(self, leases: Sequence[tuple[str, str]]) -> None:
        """Give (task id, lease token) pairs back unused; all or nothing like ``report``."""
        ...

    def add_targets(self, ids: Sequence[str], kind: TaskKind) -> int:
        """Add ``<source>:<target>`` ids of ``kind``; returns how many were new."""
        ...


class StorageGateway(Protocol):
    def write_posts(self, posts: Sequence[Post]) -> int:
        """Store posts durably; returns how many were acknowledged (stored or spooled)."""
        ...

    def write_reviews(self, reviews: Sequence[Review]) -> int: ...


class _IceGateway:
    """One typed proxy; every remote call goes through ``_invoke`` (error translation in one place)."""

    #: Who answers, for error messages ("cannot reach the scheduler (getUsers): ...").
    role = "server"

    def __init__(self, proxy: Any) -> None:
        self.proxy = proxy

    def _invoke(self, operation: str, *args: Any) -> Any:
        with rpc.remote_calls(f"{self.role} ({operation})"):
            return getattr(self.proxy, operation)(*args)


class IceScheduler(_IceGateway):
    """SchedulerGateway over a ``Crawler::Scheduler`` proxy (``rpc.scheduler_proxy``)."""

    role = "scheduler"

    def lease(self, worker_id: str, count: int) -> list[Task]:
        if count <= 1:
            return [rpc.task_from_slice(self._invoke("getUser", worker_id))]
        return [rpc.task_from_slice(task) for task in self._invoke("getUsers", worker_id, count)]

    def report(self, reports: Sequence[Report]) -> None:
        self._invoke("putUsers", [rpc.report_to_slice(report) for report in reports])

    def release(self, leases: Sequence[tuple[str, str]]) -> None:
        self._invoke("releaseUsers", [rpc.crawler().LeaseRef(taskId=task_id, leaseToken=token)
                                      for task_id, token in leases])

    def add_targets(self, ids: Sequence[str], kind: TaskKind) -> int:
        return int(self._invoke("addUsers", list(ids), rpc.crawler().TaskKind[kind.name]))


class IceStorage(_IceGateway):
    """StorageGateway over a ``Crawler::Storage`` proxy (``rpc.storage_proxy``)."""

    role = "storage server"

    def write_posts(self, posts: Sequence[Post]) -> int:
        ack = self._invoke("writeWB", [rpc.post_to_slice(post) for post in posts])
        return int(ack.stored + ack.spooled)

    def write_reviews(self, reviews: Sequence[Review]) -> int:
        ack = self._invoke("writeReviews", [rpc.review_to_slice(review) for review in reviews])
        return int(ack.stored + ack.spooled)

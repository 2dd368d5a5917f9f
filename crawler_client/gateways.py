"""The client's two remote collaborators behind small Protocols, and their Ice implementations.

The lease loop and the sink (``crawler_client.daemon``, ``crawler_client.sink``) only see these Protocols and
core types; Slice types and Ice exceptions stop here. Errors a caller must handle:

* ``NoWorkError`` (lease), ``LeaseLostError`` / ``InvalidArgumentError`` with ``index`` (report, release),
  ``InvalidRecordsError`` (write: the other records WERE stored) — the servers' own answers;
* ``ServiceError`` — the server did not answer (connection refused, timeout, communicator gone, or no answer
  before a ``CallCutoff``'s deadline) and ``StorageUnavailableError`` — storage answered but could not take the
  write. Both mean "keep it, retry later".
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import Ice

from icecrawler import rpc
from icecrawler.errors import (
    ConfigError,
    InvalidArgumentError,
    LeaseLostError,
    NoWorkError,
    ServiceError,
    StorageUnavailableError,
)
from icecrawler.models import Post, Report, Review, Task, TaskKind
from icecrawler.settings import Settings
from icecrawler.shards import ShardMap, shard_of_host

__all__ = [
    "CLIENT_PROPERTIES",
    "CallCutError",
    "CallCutoff",
    "IceScheduler",
    "IceStorage",
    "SchedulerGateway",
    "ShardedScheduler",
    "StorageGateway",
    "TargetsGateway",
    "per_kind",
    "scheduler_gateway",
    "shared_cutoff",
]

log = logging.getLogger(__name__)

#: This machine's clock and the scheduler's may disagree by this much (s) before the client says so, and it says so
#: at most this often: the estimate is a bound from one call, so a slow call alone never warns.
CLOCK_WARN_S = 5.0
CLOCK_WARN_EVERY_S = 600.0

#: Most entries ShardedScheduler keeps in each of its memories (a bound, not a size anyone should reach).
_MEMORY_CAP = 100_000


class SchedulerGateway(Protocol):
    """The scheduler as a client uses it."""

    def lease(self, worker_id: str, count: int) -> list[Task]:
        """Lease up to ``count`` due tasks; raises NoWorkError when none is due."""
        ...

    def report(self, reports: Sequence[Report]) -> None:
        """All or nothing; LeaseLostError/InvalidArgumentError name the offending ``index``."""
        ...

    def release(self, leases: Sequence[tuple[str, str]]) -> None:
        """Give (task id, lease token) pairs back unused; all or nothing like ``report``."""
        ...


class TargetsGateway(SchedulerGateway, Protocol):
    """The scheduler as the operator's commands (``icecrawler seed``, ``remove``) use it: a client's calls plus the
    targets' own."""

    def add_targets(self, ids: Sequence[str], kind: TaskKind) -> int:
        """Add ``<source>:<target>`` ids of ``kind``; returns how many were new."""
        ...

    def remove_targets(self, ids: Sequence[str], kind: TaskKind) -> int:
        """Remove ``<source>:<target>`` ids of ``kind``; returns how many were known (and are now gone)."""
        ...

    def hold_host(self, host: str, seconds: float, reason: str) -> float:
        """Hold ``host`` for ``seconds`` (0: lift); returns how long it is held now."""
        ...


def per_kind(
    call: Callable[[Sequence[str], TaskKind], int], groups: dict[TaskKind, list[str]], batch: int
) -> dict[TaskKind, int]:
    """``call`` (a ``TargetsGateway``'s ``add_targets`` or ``remove_targets``, which route ids to their shards) with
    each kind's ids (``icecrawler.sourcespec.group_by_kind``), in calls of at most ``batch``; the sum of its counts
    per kind."""
    return {
        kind: sum(call(ids[i : i + batch], kind) for i in range(0, len(ids), batch)) for kind, ids in groups.items()
    }


class StorageGateway(Protocol):
    def write_posts(self, posts: Sequence[Post]) -> int:
        """Store posts durably; returns how many were acknowledged (stored or spooled)."""
        ...

    def write_reviews(self, reviews: Sequence[Review]) -> int: ...


#: Ice properties the client daemon's communicator starts with (its ``--Ice.Config`` may override them). At exit the
#: communicator closes its connections gracefully, waiting up to this long (default 10 s) for each server to
#: acknowledge; a server that answers nothing (see ``CallCutoff``) only ever lets it time out.
CLIENT_PROPERTIES = {"Ice.Connection.Client.CloseTimeout": "1"}


class CallCutError(ServiceError):
    """A call a stopping client's ``CallCutoff`` ended: not sent (``sent`` False: nothing reached the server), or
    sent and abandoned unanswered (``sent`` True: the server may still have applied it). The stop, not the
    server's health: a caller neither backs off nor says the server is down for it."""

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


class CallCutoff:
    """Ends the remote calls still unanswered at one deadline: a stopping client's.

    A server that stops answering without closing its connections (a SIGSTOPped process, a host that drops
    packets) holds each call until ``Ice.Default.InvocationTimeout`` or the connection's idle check (30 s and
    20 s by default, longer where an operator raised them), and a client stopping on SIGTERM waited out every
    such call in turn, well past its supervisor's stop timeout. The daemon's ``stop`` sets the deadline; a call
    still waiting then is cancelled (its answer, should one ever come, is ignored; the server may still act on
    the request), and a call after it is not sent. Until ``cut`` is called a call waits as long as Ice lets it."""

    #: How often a waiting call looks at the deadline (seconds): how late after it a call ends, at most.
    POLL_S = 0.1

    def __init__(self) -> None:
        self._deadline = math.inf

    def cut(self, deadline: float) -> None:
        """Calls still unanswered at ``deadline`` (``time.monotonic``) end then; later calls are not sent."""
        self._deadline = deadline

    def passed(self) -> bool:
        return time.monotonic() >= self._deadline

    def wait(self, future: Any) -> bool:
        """Wait for ``future`` (an Ice invocation's); False, the invocation cancelled, when the deadline came
        first."""
        done = threading.Event()
        future.add_done_callback(lambda _future: done.set())
        while not done.wait(min(self.POLL_S, max(0.0, self._deadline - time.monotonic()))):
            if self.passed():
                return not future.cancel()  # cancel() is False when the answer came just now
        return True


class _IceGateway:
    """One typed proxy; every remote call goes through ``_invoke`` (error translation in one place)."""

    #: Who answers, for error messages ("cannot reach the scheduler (getUsers): ...").
    role = "server"

    def __init__(self, proxy: Any, cutoff: CallCutoff | None = None) -> None:
        self.proxy = proxy
        self.cutoff = cutoff

    def _invoke(self, operation: str, *args: Any) -> Any:
        with rpc.remote_calls(f"{self.role} ({operation})", self.proxy):
            if self.cutoff is None:
                return getattr(self.proxy, operation)(*args)
            if self.cutoff.passed():
                raise CallCutError(
                    f"{operation} to the {self.role} not sent: past this client's stop deadline", sent=False
                )
            future = getattr(self.proxy, f"{operation}Async")(*args)
            if not self.cutoff.wait(future):
                raise CallCutError(
                    f"the {self.role} at {self.proxy} did not answer {operation} before this client's stop deadline "
                    "(client.shutdown_grace_s): call abandoned",
                    sent=True,
                )
            return future.result()


class IceScheduler(_IceGateway):
    """SchedulerGateway over a ``Crawler::Scheduler`` proxy (``rpc.scheduler_proxy``)."""

    role = "scheduler"

    def __init__(self, proxy: Any, cutoff: CallCutoff | None = None) -> None:
        super().__init__(proxy, cutoff)
        self._clock_warned_s = float("-inf")

    def _invoke(self, operation: str, *args: Any) -> Any:
        """The scheduler's StorageUnavailable (its database cannot take changes now: a full disk) is, to a
        client, the scheduler being unavailable: keep the work and retry later."""
        try:
            return super()._invoke(operation, *args)
        except StorageUnavailableError as exc:
            raise ServiceError(f"the scheduler cannot take changes now ({operation}): {exc}") from exc

    def lease(self, worker_id: str, count: int) -> list[Task]:
        """Leased tasks, their deadlines on this machine's clock (``Task.on_local_clock``)."""
        sent_s = time.time()
        if count <= 1:
            tasks = [rpc.task_from_slice(self._invoke("getUser", worker_id))]
        else:
            tasks = [rpc.task_from_slice(task) for task in self._invoke("getUsers", worker_id, count)]
        if tasks:
            self._check_clock(tasks[0].clock_ahead_s(sent_s, time.time()))
        return [task.on_local_clock(sent_s) for task in tasks]

    def _check_clock(self, ahead_s: float) -> None:
        """Warn, at most every ``CLOCK_WARN_EVERY_S``, when this machine's clock and the scheduler's disagree by
        more than ``CLOCK_WARN_S``: leases are safe (timed here), but item times a site gives relative to now
        ("5 minutes ago") are off by as much."""
        now = time.monotonic()
        if abs(ahead_s) <= CLOCK_WARN_S or now - self._clock_warned_s < CLOCK_WARN_EVERY_S:
            return
        self._clock_warned_s = now
        log.warning(
            "this machine's clock is at least %.0f s %s the scheduler's: leases are timed on this clock, but times "
            'a site gives relative to now are off by as much; run time sync on both (DEPLOY.md, "Clocks")',
            abs(ahead_s),
            "ahead of" if ahead_s > 0 else "behind",
        )

    def report(self, reports: Sequence[Report]) -> None:
        self._invoke("putUsers", [rpc.report_to_slice(report) for report in reports])

    def release(self, leases: Sequence[tuple[str, str]]) -> None:
        self._invoke(
            "releaseUsers", [rpc.crawler().LeaseRef(taskId=task_id, leaseToken=token) for task_id, token in leases]
        )

    def add_targets(self, ids: Sequence[str], kind: TaskKind) -> int:
        return int(self._invoke("addUsers", list(ids), rpc.crawler().TaskKind[kind.name]))

    def remove_targets(self, ids: Sequence[str], kind: TaskKind) -> int:
        return int(self._invoke("removeUsers", list(ids), rpc.crawler().TaskKind[kind.name]))

    def hold_host(self, host: str, seconds: float, reason: str) -> float:
        return float(self._invoke("holdHost", host, float(seconds), reason))


class ShardedScheduler:
    """SchedulerGateway over the shards of a sharded scheduler (``icecrawler.shards``), given in shard order.

    Leases come from the shards in turn: each call starts one shard further on, and a shard with nothing due, or
    one that does not answer, passes to the next (the call fails only if every shard did). Every report,
    release, new id and removed id goes to the shard that owns its task: the one that leased it, else the one its
    host hashes to. A call whose items all belong to one shard (every report of one leased batch does) gets that
    shard's all-or-nothing answer. A call that spans shards is sent shard by shard; if one shard refuses an item,
    the error names the item's index in the whole call. If a shard refuses or does not answer, the items other
    shards already took are remembered, so that when the caller sends the call again (without the refused item,
    as ``Sink`` does), they are not sent twice."""

    def __init__(self, shards: Sequence[TargetsGateway], shard_map: ShardMap) -> None:
        if len(shards) != shard_map.shards:
            raise ConfigError(f"{len(shards)} scheduler proxies for a map of {shard_map.shards} shards")
        self._shards = list(shards)
        self._map = shard_map
        self._lock = threading.Lock()
        self._next = 0
        #: task id -> the shard that leased it, until it is reported or released.
        self._leased_by: dict[str, int] = {}
        #: (task id, lease token) of items a shard took in a call that another shard then refused.
        self._taken: dict[tuple[str, str], None] = {}

    def lease(self, worker_id: str, count: int) -> list[Task]:
        with self._lock:
            start, self._next = self._next, (self._next + 1) % len(self._shards)
        refusals: list[NoWorkError] = []
        unreachable: list[ServiceError] = []
        for step in range(len(self._shards)):
            shard = (start + step) % len(self._shards)
            try:
                tasks = self._shards[shard].lease(worker_id, count)
            except NoWorkError as exc:
                refusals.append(exc)
                continue
            except CallCutError:  # the client's stop, not this shard's health: no other shard's getUsers either
                raise
            except ServiceError as exc:  # down or restarting: its tasks wait, the other shards' do not
                unreachable.append(exc)
                continue
            with self._lock:
                for task in tasks:
                    self._leased_by[task.id] = shard
                _cap(self._leased_by)
            return tasks
        if not refusals:
            raise unreachable[0]
        waits = [exc.next_due_in_ms for exc in refusals if exc.next_due_in_ms >= 0]
        stopping = all(exc.code == "ShuttingDown" for exc in refusals)
        raise NoWorkError(
            f"no task is due on any of the {len(self._shards)} scheduler shards",
            min(waits) if waits else -1,
            code="ShuttingDown" if stopping else "QueueEmpty",
        )

    def report(self, reports: Sequence[Report]) -> None:
        self._route(
            reports, lambda report: (report.task_id, report.lease_token), lambda gateway, part: gateway.report(part)
        )

    def release(self, leases: Sequence[tuple[str, str]]) -> None:
        self._route(leases, lambda lease: lease, lambda gateway, part: gateway.release(part))

    def add_targets(self, ids: Sequence[str], kind: TaskKind) -> int:
        return self._per_target_shard(ids, lambda gateway, part: gateway.add_targets(part, kind))

    def remove_targets(self, ids: Sequence[str], kind: TaskKind) -> int:
        return self._per_target_shard(ids, lambda gateway, part: gateway.remove_targets(part, kind))

    def hold_host(self, host: str, seconds: float, reason: str) -> float:
        return self._shards[shard_of_host(host, self._map.shards)].hold_host(host, seconds, reason)

    def _per_target_shard(self, ids: Sequence[str], call: Callable[[TargetsGateway, list[str]], int]) -> int:
        """``call`` each shard with the ids its hosts hash to; the sum of the counts it returns."""
        parts = _by_shard(range(len(ids)), lambda index: self._map.of_target(ids[index]))
        total = 0
        for shard, indexes in parts.items():
            with _whole_call_index(indexes):
                total += call(self._shards[shard], [ids[index] for index in indexes])
        return total

    def _route[T](
        self,
        items: Sequence[T],
        lease_of: Callable[[T], tuple[str, str]],
        send: Callable[[SchedulerGateway, list[T]], None],
    ) -> None:
        """Send each item to its task's shard (see the class docstring); items are (task id, token) leases."""
        with self._lock:
            # Taken in an earlier, partly refused call: skipped, and forgotten only once this call succeeds (a call
            # that fails too is sent again, and must skip them again).
            skipped = [lease for lease in map(lease_of, items) if lease in self._taken]
            fresh = [index for index, item in enumerate(items) if lease_of(item) not in self._taken]
            owners = {index: self._leased_by.get(lease_of(items[index])[0], -1) for index in fresh}
        parts = _by_shard(
            fresh, lambda index: owners[index] if owners[index] >= 0 else self._map.of_task(lease_of(items[index])[0])
        )
        sent: list[int] = []
        try:
            for shard, indexes in parts.items():
                with _whole_call_index(indexes):
                    send(self._shards[shard], [items[index] for index in indexes])
                sent.extend(indexes)
        except Exception:
            with self._lock:
                self._taken.update((lease_of(items[index]), None) for index in sent)
                _cap(self._taken)
            raise
        else:
            with self._lock:
                for lease in skipped:
                    self._taken.pop(lease, None)
        finally:
            with self._lock:
                for index in sent:
                    self._leased_by.pop(lease_of(items[index])[0], None)


def _by_shard(indexes: Sequence[int] | range, shard_of: Callable[[int], int]) -> dict[int, list[int]]:
    """Item indexes grouped by shard, shards in order, each group in call order."""
    parts: dict[int, list[int]] = {}
    for index in indexes:
        parts.setdefault(shard_of(index), []).append(index)
    return dict(sorted(parts.items()))


@contextmanager
def _whole_call_index(indexes: list[int]) -> Iterator[None]:
    """Inside: a LeaseLost/InvalidArgument naming item ``i`` of one shard's part names ``indexes[i]`` instead."""
    try:
        yield
    except (LeaseLostError, InvalidArgumentError) as exc:
        if 0 <= exc.index < len(indexes):
            exc.index = indexes[exc.index]
        raise


def _cap(memory: dict[Any, Any]) -> None:
    """Forget the oldest entries past ``_MEMORY_CAP`` (dicts keep insertion order)."""
    for key in list(memory)[: max(0, len(memory) - _MEMORY_CAP)]:
        del memory[key]


def scheduler_gateway(comm: Ice.Communicator, settings: Settings, cutoff: CallCutoff | None = None) -> TargetsGateway:
    """The scheduler as the client and the operator's commands see it: one ``IceScheduler``, or a
    ``ShardedScheduler`` over every proxy of ``Scheduler.Proxies`` (``rpc.scheduler_proxies``), routed by the hosts
    of ``settings``' sources; with ``cutoff``, its calls end at the cutoff's deadline (the client daemon's)."""
    proxies = rpc.scheduler_proxies(comm)
    if len(proxies) == 1:
        return IceScheduler(proxies[0], cutoff)
    return ShardedScheduler(
        [IceScheduler(proxy, cutoff) for proxy in proxies], ShardMap.from_settings(settings, len(proxies))
    )


def shared_cutoff(*gateways: object) -> CallCutoff:
    """The one ``CallCutoff`` the Ice gateways among ``gateways`` (a ``ShardedScheduler``'s shards included) were
    built with, so that a daemon's stop cannot forget to bound them; a new one where none is an Ice gateway (memory
    stand-ins make no remote call). ConfigError for an Ice gateway without a cutoff, or gateways with different
    ones: a stop would leave their calls unbounded."""
    found: list[CallCutoff | None] = []
    for gateway in gateways:
        for part in gateway._shards if isinstance(gateway, ShardedScheduler) else [gateway]:
            if isinstance(part, _IceGateway):
                found.append(part.cutoff)
    cutoffs = [cutoff for cutoff in found if cutoff is not None]
    if len(cutoffs) < len(found):
        raise ConfigError("a client daemon's Ice gateways need a CallCutoff: without one its stop is unbounded")
    if len({id(cutoff) for cutoff in cutoffs}) > 1:
        raise ConfigError("a client daemon's Ice gateways must share one CallCutoff: the stop cuts only one")
    return cutoffs[0] if cutoffs else CallCutoff()


class IceStorage(_IceGateway):
    """StorageGateway over a ``Crawler::Storage`` proxy (``rpc.storage_proxy``)."""

    role = "storage server"

    def write_posts(self, posts: Sequence[Post]) -> int:
        ack = self._invoke("writeWB", [rpc.post_to_slice(post) for post in posts])
        return int(ack.stored + ack.spooled)

    def write_reviews(self, reviews: Sequence[Review]) -> int:
        ack = self._invoke("writeReviews", [rpc.review_to_slice(review) for review in reviews])
        return int(ack.stored + ack.spooled)

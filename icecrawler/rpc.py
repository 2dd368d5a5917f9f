"""Everything Ice in one place: building communicators, proxies and servers, and mapping core errors to Slice
exceptions and back. Two parts live in modules of their own and are re-exported here, so callers import only
``rpc``: loading the Slice contract (``icecrawler.contract``: ``crawler()``, ``load_slice``, ``SLICE_FILE``) and
converting between the Slice types and the plain core types of ``icecrawler.models`` (``icecrawler.convert``).
``stop_on_signals`` (``icecrawler.stopsignals``, which imports no Ice) is re-exported too. A daemon's listening
set-up (the listening policy, the port probe, the gate its servants check) is ``icecrawler.listening``, which only
the daemons import.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import logging
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

import Ice

from icecrawler.contract import SLICE_FILE, crawler, load_slice
from icecrawler.convert import (
    post_from_slice,
    post_to_slice,
    report_from_slice,
    report_to_slice,
    review_from_slice,
    review_to_slice,
    task_from_slice,
    task_to_slice,
)
from icecrawler.errors import (
    ConfigError,
    InvalidArgumentError,
    InvalidRecordsError,
    LeaseLostError,
    NotAuthorizedError,
    NoWorkError,
    ServiceError,
    StorageUnavailableError,
)
from icecrawler.stopsignals import held_stop, parent_gone, stop_on_signals

__all__ = [
    "SCHEDULER_ADAPTER",
    "SCHEDULER_ENDPOINTS",
    "SCHEDULER_IDENTITY",
    "SERVER_GC_THRESHOLDS",
    "SLICE_FILE",
    "STORAGE_ADAPTER",
    "STORAGE_ENDPOINTS",
    "STORAGE_IDENTITY",
    "Converted",
    "FutureLike",
    "communicator",
    "core_errors",
    "crawler",
    "create_adapter",
    "from_slice_error",
    "listen_endpoints",
    "load_slice",
    "map_errors",
    "one_line",
    "post_from_slice",
    "post_to_slice",
    "remote_calls",
    "report_from_slice",
    "report_to_slice",
    "review_from_slice",
    "review_to_slice",
    "scheduler_proxies",
    "scheduler_proxy",
    "serve",
    "settle_server_heap",
    "stop_on_signals",
    "storage_proxy",
    "storage_proxy_text",
    "task_from_slice",
    "task_to_slice",
    "then",
    "to_slice_error",
]

log = logging.getLogger(__name__)

#: Where each server listens and how clients find it. A property file (deploy/*.conf) or an IceGrid locator
#: overrides these: ``SchedulerAdapter.Endpoints``, ``StorageAdapter.Endpoints`` on the servers and
#: ``Scheduler.Proxy``, ``Storage.Proxy`` on the clients.
SCHEDULER_ADAPTER = "SchedulerAdapter"
SCHEDULER_IDENTITY = "scheduler"
SCHEDULER_ENDPOINTS = "tcp -h 127.0.0.1 -p 10000"
STORAGE_ADAPTER = "StorageAdapter"
STORAGE_IDENTITY = "storage"
STORAGE_ENDPOINTS = "tcp -h 127.0.0.1 -p 10001"

#: Ice properties every icecrawler communicator starts with (a property file or argv overrides them).
BASE_PROPERTIES: dict[str, str] = {
    # Replies (a client's leased tasks) must fit in one message. What a daemon accepts in a request is its
    # adapter's own, smaller limit (``<Adapter>.MessageSizeMax``, derived from the batch limits: limits.py).
    "Ice.MessageSizeMax": "65536",
    # A peer that sends nothing for 30 s is dropped, with any half-received request it holds in memory. Our
    # clients send a heartbeat every 10 s (half their own idle timeout) whenever they send nothing else.
    "Ice.Connection.Server.IdleTimeout": "30",
    "Ice.Connection.Client.IdleTimeout": "20",
    # Bounded waits: no call hangs forever on a dead peer.
    "Ice.Connection.Client.ConnectTimeout": "5",
    "Ice.Default.InvocationTimeout": "30000",
    "Ice.Warn.Connections": "0",
}


def communicator(args: Sequence[str] = (), properties: dict[str, str] | None = None) -> Ice.Communicator:
    """A communicator with our base properties, then ``--Ice.Config`` files and ``--Ice.*`` args on top."""
    argv = ["icecrawler", *args]
    try:
        props = Ice.createProperties()
        for key, value in {**BASE_PROPERTIES, **(properties or {})}.items():
            props.setProperty(key, value)
        props = Ice.createProperties(argv, props)
        init = Ice.InitializationData()
        init.properties = props
        init.threadStart = _keep_thread_state
        init.threadStop = _drop_thread_state
        return Ice.Communicator(initData=init)
    except Ice.LocalException as exc:  # a missing --Ice.Config file, an unknown or malformed Ice property
        raise ConfigError(f"Ice properties: {one_line(exc).rstrip(':')}{_tls_files_hint(exc)}") from exc


def _tls_files_hint(exc: Exception) -> str:
    """What to check when IceSSL cannot load this node's files: OpenSSL often says only which file it was."""
    text = str(exc)
    if "IceSSL" in text and ("private key" in text or "certificate" in text):
        return (
            " (IceSSL.CertFile and IceSSL.KeyFile must be one pair, written together by `icecrawler certs issue`, "
            "and readable by this user)"
        )
    return ""


# Ice calls into Python from its own threads (dispatch, AMD replies, callbacks). Each such call takes the GIL
# with PyGILState_Ensure, and on a thread with no Python thread state of its own that creates one (with a fresh
# frame stack) and destroys it again afterwards, a visible share of the CPU of a small dispatch (the echo baseline of
# ``icecrawler bench scheduler`` measures an empty call). One more
# PyGILState_Ensure held from the thread's start to its stop keeps one thread state per Ice thread.
_gil_ensure = ctypes.pythonapi.PyGILState_Ensure
_gil_ensure.restype = ctypes.c_int
_gil_release = ctypes.pythonapi.PyGILState_Release
_gil_release.argtypes = [ctypes.c_int]
_ice_thread = threading.local()


def _keep_thread_state() -> None:
    _ice_thread.gil_state = _gil_ensure()


def _drop_thread_state() -> None:
    state = getattr(_ice_thread, "gil_state", None)
    if state is not None:
        del _ice_thread.gil_state
        _gil_release(state)


def scheduler_proxy(comm: Ice.Communicator) -> Any:
    """Typed Scheduler proxy from the ``Scheduler.Proxy`` property (default: the local scheduler)."""
    text = comm.getProperties().getPropertyWithDefault("Scheduler.Proxy", f"{SCHEDULER_IDENTITY}:{SCHEDULER_ENDPOINTS}")
    return crawler().SchedulerPrx(comm, text)


def scheduler_proxies(comm: Ice.Communicator) -> list[Any]:
    """Typed proxies of every scheduler shard, in shard order: the ``Scheduler.Proxies`` property (proxies
    separated by ``;``) when set, else the one ``scheduler_proxy`` (an unsharded scheduler)."""
    text = comm.getProperties().getProperty("Scheduler.Proxies")
    if not text.strip():
        return [scheduler_proxy(comm)]
    return [crawler().SchedulerPrx(comm, part.strip()) for part in text.split(";") if part.strip()]


def storage_proxy_text(comm: Ice.Communicator) -> str:
    """The ``Storage.Proxy`` property as written (default: the local storage server), for naming what was tried."""
    return comm.getProperties().getPropertyWithDefault("Storage.Proxy", f"{STORAGE_IDENTITY}:{STORAGE_ENDPOINTS}")


def storage_proxy(comm: Ice.Communicator) -> Any:
    """Typed Storage proxy from the ``Storage.Proxy`` property (``storage_proxy_text``)."""
    return crawler().StoragePrx(comm, storage_proxy_text(comm))


#: The daemons' garbage-collector thresholds (Python's default is (700, 10, 10)). Every call unmarshals Slice
#: structs and builds core objects that die with the call and form no cycles; with the default, the objects of
#: calls in flight were scanned again and again and promoted, and collection showed up in a profile of the storage
#: server under ``icecrawler bench storage``. Collections still run, far less often in the young generation.
SERVER_GC_THRESHOLDS = (50_000, 20, 100)


def settle_server_heap() -> None:
    """For a daemon, once start-up has loaded what it keeps (modules, Slice types, a scheduler's queue index):
    freeze that out of every later collection, and make young collections rare (``SERVER_GC_THRESHOLDS``)."""
    gc.freeze()
    gc.set_threshold(*SERVER_GC_THRESHOLDS)


def serve(
    comm: Ice.Communicator,
    adapter_name: str,
    servants: dict[str, Ice.Object],
    default_endpoints: str,
    on_shutdown: Callable[[], None] | None = None,
    on_stop_requested: Callable[[], None] | None = None,
    on_reload: Callable[[], None] | None = None,
) -> None:
    """Activate ``servants`` on one adapter and block until SIGTERM/SIGINT or ``shutdown()``; SIGHUP runs
    ``on_reload`` when one is given (``stop_on_signals``).

    Call ``listening.guarded_listening`` first (a daemon does, before it opens its data); without it the endpoints
    are those of ``<adapter_name>.Endpoints`` or ``default_endpoints``. ``on_stop_requested`` runs as soon as the
    stop is requested, before the adapter drains its dispatches (e.g. to refuse new work with a typed error);
    ``on_shutdown`` runs after the adapter is deactivated, and also when serving could not start, so a daemon's
    own threads never keep a failed start-up alive.
    """
    stop = threading.Event()
    active = False
    adapter: Ice.ObjectAdapter | None = None
    try:
        listen_endpoints(comm, adapter_name, default_endpoints)
        adapter = create_adapter(comm, adapter_name)
        for identity, servant in servants.items():
            adapter.add(servant, Ice.stringToIdentity(identity))
        held = held_stop(reloads=on_reload is not None)
        if held is not None or parent_gone.is_set():
            # Stopped before it served: going online would only register its endpoints with an IceGrid registry and
            # take them back at once, and with its node gone the next node took them for its own server's.
            log.info("signal %d during start-up: shutting down before listening", held or signal.SIGTERM)
            return
        adapter.activate()
        active = True
        props = comm.getProperties()
        log.info(
            "%s listening on %s (requests up to %s KiB)",
            adapter_name,
            props.getProperty(f"{adapter_name}.Endpoints"),
            props.getPropertyWithDefault(f"{adapter_name}.MessageSizeMax", props.getProperty("Ice.MessageSizeMax")),
        )
        with stop_on_signals(stop, on_reload):
            while not stop.wait(0.2):
                if comm.isShutdown():
                    break
    finally:
        if on_stop_requested is not None and active:
            on_stop_requested()
        if adapter is not None:
            if parent_gone.is_set():  # the registry's record is the next node's server's now: do not take it back
                adapter.setLocator(None)
            adapter.deactivate()
            adapter.waitForDeactivate()
        if on_shutdown is not None:
            on_shutdown()
        if active:
            log.info("%s stopped", adapter_name)


# --- errors -----------------------------------------------------------------------------------------------

F = TypeVar("F", bound=Callable[..., Any])


def create_adapter(comm: Ice.Communicator, adapter_name: str) -> Ice.ObjectAdapter:
    """Create (and bind) ``adapter_name``; a failure is a one-line ServiceError.

    An adapter's own thread pool (``<adapter_name>.ThreadPool.*``) becomes the communicator's server pool (the
    same thing for a daemon's one adapter): when binding fails, Ice joins an adapter's own pool threads inside
    ``createObjectAdapter``, which holds the GIL, while each thread waits for the GIL in our thread hooks, so
    the daemon hung forever on a port in use.
    """
    props = comm.getProperties()
    for key, value in props.getPropertiesForPrefix(f"{adapter_name}.ThreadPool.").items():
        props.setProperty("Ice.ThreadPool.Server." + key.rsplit(".", 1)[1], value)
        props.setProperty(key, "")
    try:
        return comm.createObjectAdapter(adapter_name)
    except Ice.LocalException as exc:
        listen = props.getProperty(f"{adapter_name}.Endpoints")
        raise ServiceError(f"{adapter_name} cannot listen on {listen}: {one_line(exc)}") from exc


def listen_endpoints(comm: Ice.Communicator, adapter_name: str, default_endpoints: str, endpoints: str = "") -> str:
    """The endpoints ``adapter_name`` will listen on (``endpoints`` if given, else its property, else the default),
    set as its ``Endpoints`` property."""
    props = comm.getProperties()
    key = f"{adapter_name}.Endpoints"
    if endpoints:
        props.setProperty(key, endpoints)
    elif not props.getProperty(key):
        props.setProperty(key, default_endpoints)
    return props.getProperty(key)


def one_line(exc: BaseException) -> str:
    """An exception as one short line: its class and the first line of its text (Ice's can span several)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0][:300]}" if lines else type(exc).__name__


def to_slice_error(exc: Exception) -> Exception:
    """The Slice exception that stands for a core error (or ``exc`` itself if it is not ours)."""
    C = crawler()
    if isinstance(exc, InvalidRecordsError):
        return C.InvalidRecords(
            code=C.ErrorCode.RecordRejected,
            message=_short(str(exc)),
            field="records",
            index=-1,
            rejectedIndexes=[index for index, _ in exc.rejected],
            reasons=[reason for _, reason in exc.rejected],
            stored=exc.stored,
        )
    if isinstance(exc, InvalidArgumentError):
        return C.InvalidArgument(
            code=C.ErrorCode[exc.code], message=_short(str(exc)), field=_short(exc.field), index=exc.index
        )
    if isinstance(exc, NoWorkError):
        return C.NoWork(code=C.ErrorCode[exc.code], message=str(exc), nextDueInMs=exc.next_due_in_ms)
    if isinstance(exc, LeaseLostError):
        return C.LeaseLost(
            code=C.ErrorCode[exc.code], message=_short(str(exc)), taskId=_short(exc.task_id), index=exc.index
        )
    if isinstance(exc, StorageUnavailableError):
        return C.StorageUnavailable(code=C.ErrorCode.Unavailable, message=str(exc))
    if isinstance(exc, NotAuthorizedError):
        return C.NotAuthorized(code=C.ErrorCode.Forbidden, message=str(exc))
    return exc


#: The most characters of a message or field a declared exception carries back: a message built around a bad
#: argument is cut here even if its author forgot ``errors.quote``.
MESSAGE_MAX_CHARS = 1000


def _short(text: str) -> str:
    return text if len(text) <= MESSAGE_MAX_CHARS else text[:MESSAGE_MAX_CHARS] + f"... ({len(text)} chars)"


#: Core errors that a servant passes on as their declared Slice exceptions.
_DECLARED_ERRORS = (InvalidArgumentError, NoWorkError, LeaseLostError, StorageUnavailableError, NotAuthorizedError)


def map_errors[F: Callable[..., Any]](method: F) -> F:
    """Servant decorator: core errors leave as their declared Slice exceptions, never UnknownException."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except _DECLARED_ERRORS as exc:
            raise to_slice_error(exc) from exc

    return wrapper  # type: ignore[return-value]


class FutureLike[T](Protocol):
    """What ``then`` needs of a future (``concurrent.futures.Future`` and the scheduler's ``Pending`` have it)."""

    def result(self, timeout: float | None = None) -> T: ...

    def add_done_callback(self, callback: Callable[[Any], object], /) -> None: ...


class Converted[T, R]:
    """A view of a future whose result is ``convert(result)`` and whose core errors are their declared Slice
    exceptions: what an asynchronously dispatched servant returns (Ice calls ``add_done_callback``, then
    ``result``). Converting on read needs no second future."""

    __slots__ = ("_convert", "_source")

    def __init__(self, source: FutureLike[T], convert: Callable[[T], R]) -> None:
        self._source = source
        self._convert = convert

    def add_done_callback(self, callback: Callable[[Converted[T, R]], object]) -> None:
        self._source.add_done_callback(lambda _: callback(self))

    def result(self, timeout: float | None = None) -> R:
        try:
            return self._convert(self._source.result(timeout))
        except _DECLARED_ERRORS as exc:
            raise to_slice_error(exc) from exc


def then[T, R](future: FutureLike[T], convert: Callable[[T], R]) -> Converted[T, R]:
    """Asynchronous dispatch: the servant returns this view of ``future`` (see ``Converted``)."""
    return Converted(future, convert)


def from_slice_error(exc: Exception) -> Exception:
    """Client side: the core error for a Slice exception (so client code handles one hierarchy)."""
    C = crawler()
    if isinstance(exc, C.InvalidRecords):
        return InvalidRecordsError(list(zip(exc.rejectedIndexes, exc.reasons, strict=False)), exc.stored)
    if isinstance(exc, C.InvalidArgument):
        return InvalidArgumentError(exc.message, code=exc.code.name, field=exc.field, index=exc.index)
    if isinstance(exc, C.NoWork):
        return NoWorkError(exc.message, exc.nextDueInMs, code=exc.code.name)
    if isinstance(exc, C.LeaseLost):
        return LeaseLostError(exc.message, task_id=exc.taskId, index=exc.index, code=exc.code.name)
    if isinstance(exc, C.StorageUnavailable):
        return StorageUnavailableError(exc.message)
    if isinstance(exc, C.NotAuthorized):
        return NotAuthorizedError(exc.message)
    return exc


@contextmanager
def core_errors() -> Iterator[None]:
    """Client side: re-raise Slice exceptions as core errors inside the block."""
    C = crawler()
    try:
        yield
    except C.CrawlerError as exc:
        raise from_slice_error(exc) from exc


@contextmanager
def remote_calls(what: str, proxy: Any = None) -> Iterator[None]:
    """Client side: Slice exceptions become core errors, and Ice's own failures become ServiceError naming
    ``what`` (and ``proxy``, the proxy tried, so that a wrong port in a property file shows), so a command prints
    one clear line instead of a traceback: "cannot reach" when there was no answer (refused, timed out,
    connection lost), "reachable but failed" when the server answered with an Ice error (UnknownException: a bug
    there; ObjectNotExist: the wrong server)."""
    where = f"{what} at {proxy}" if proxy is not None else what
    try:
        with core_errors():
            yield
    except Ice.DispatchException as exc:  # it answered: the call failed there (a bug, a missing object)
        hint = _OTHER_CONTRACT if "MarshalException" in str(exc) else ""
        if isinstance(exc, Ice.ObjectNotExistException):
            hint = _NO_SUCH_OBJECT
        raise ServiceError(f"the {where} is reachable but failed the call: {one_line(exc)}{hint}") from exc
    except Ice.MarshalException as exc:  # it answered, with types other than ours
        raise ServiceError(
            f"the {where} answered, but not in this program's contract: {one_line(exc)}{_OTHER_CONTRACT}"
        ) from exc
    except Ice.LocalException as exc:
        raise ServiceError(f"cannot reach the {where}: {one_line(exc)}") from exc


#: An endpoint that answers without the object asked for is another daemon's (the storage server's port given
#: for the scheduler's, or the other way round).
_NO_SUCH_OBJECT = "; that endpoint serves no such object: is it another daemon's (the scheduler's or storage's)?"


#: Ice encodes structs without tags, so two versions of ``crawler.ice`` that differ in a struct cannot read each
#: other: the reader runs off the end of the data or past a field.
_OTHER_CONTRACT = (
    "; the two sides run versions of icecrawler whose Slice contracts differ: run one version on every role "
    "(CHANGELOG.md says which versions changed the contract)"
)

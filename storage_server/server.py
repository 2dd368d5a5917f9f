"""``icecrawler storage``: wire the settings into a ``StorageService`` and serve it on the StorageAdapter."""

from __future__ import annotations

import logging
import re
from contextlib import ExitStack
from pathlib import Path

from icecrawler import limits, rpc
from icecrawler.backups import (
    PeriodicBackups,
    backup_dir_keys,
    backups_lock,
    refuse_new_beside_backups,
    start_backups,
)
from icecrawler.datalock import DataLock
from icecrawler.errors import ConfigError, StorageUnavailableError
from icecrawler.listening import guarded_listening
from icecrawler.metrics import MetricsConfig, MetricsEndpoint, ScrapeCollector, disk_space_families, serve
from icecrawler.settings import Settings
from icecrawler.settings.validation import check_paths, validate_values
from storage_server.integrity import backup_files, check_store_file, mark_created, marker_of
from storage_server.servant import StorageServant
from storage_server.service import COUNT_BUDGET_S, StorageService

__all__ = ["SERVER_PROPERTIES", "backend_address", "data_locks", "open_service", "run"]

log = logging.getLogger(__name__)

#: Ice defaults of the storage server (deploy/storage.conf or --Ice.* override them): several dispatch threads, so
#: one client's slow batch never queues the others (the store work releases the GIL). The communicator's server
#: pool, not one of the adapter's own (``rpc.create_adapter`` says why).
SERVER_PROPERTIES = {
    "Ice.ThreadPool.Server.Size": "4",
    "Ice.ThreadPool.Server.SizeMax": "8",
}


def data_locks(settings: Settings) -> list[DataLock]:
    """The locks one storage server holds on its own files: its spool directory, and for the embedded backend its
    store file (with backups on, it holds ``backups_lock`` on their name too)."""
    locks = [DataLock(Path(settings.get_str("storage.spool_dir")) / "storage.lock", "storage server")]
    if settings.get_str("storage.backend") == "embedded":
        path = Path(settings.get_str("storage.embedded.path"))
        locks.append(DataLock(path.with_name(path.name + ".lock"), "storage server"))
    return locks


def data_files(settings: Settings) -> list[tuple[Path, str]]:
    """The server's own files, spool first: the spool, and the embedded store when it is the backend."""
    files = [(Path(settings.get_str("storage.spool_dir")) / "spool.sqlite3", "the spool")]
    if settings.get_str("storage.backend") == "embedded":
        files.append((Path(settings.get_str("storage.embedded.path")), "the embedded store"))
    return files


#: A backup name: a plain file name, as the server ids IceGrid gives (``Storage-1``).
BACKUP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_backup_name(name: str) -> None:
    """``storage.backup_name`` starts the backups' directory names: a plain name, or a one-line start-up error."""
    if not BACKUP_NAME.fullmatch(name):
        raise ConfigError(
            f"setting storage.backup_name={name!r}: must be a plain name (letters, digits, '.', '_', '-'; at most 64)"
        )


def open_service(settings: Settings) -> StorageService:
    """Check the files (``integrity``), then open the service on them (the caller holds ``data_locks``)."""
    recover = settings.get_bool("storage.recover")
    files = data_files(settings)
    for path, what in files:
        if not path.exists() and not marker_of(path).exists():  # to be begun anew: unless its backups are there
            name = settings.get_str("storage.backup_name")
            refuse_new_beside_backups(settings, "storage", name, f"{what} {path}", holding=path.name)
        check_store_file(path, recover, what)
    service = StorageService.from_settings(settings)
    for path, _ in files:
        mark_created(path)
    return service


def backend_address(settings: Settings) -> str:
    """Where ``storage.backend`` is, for a log line an operator can check against the settings."""
    if settings.get_str("storage.backend") == "hbase":
        return f"{settings.get_str('storage.hbase.host')}:{settings.get_int('storage.hbase.port')} (Thrift)"
    return settings.get_str("storage.embedded.path")


def run(settings: Settings, ice_args: list[str], listen: str = "") -> int:
    """Serve until SIGTERM/SIGINT. Spooled records left from an earlier run are replayed at once.

    Settings, paths, Ice properties and endpoints are checked before the store is opened (one-line errors,
    ``icecrawler_cli.cli``); ``listen`` overrides the adapter's endpoints. One server per spool and store
    (``data_locks``); their files are checked before they are opened (``integrity``).
    """
    validate_values(settings.as_dict())
    check_backup_name(settings.get_str("storage.backup_name"))
    embedded = settings.get_str("storage.backend") == "embedded"
    check_paths(
        settings.as_dict(),
        dirs=["storage.spool_dir", *backup_dir_keys(settings, "storage")],
        files=["storage.embedded.path"] if embedded else [],
    )
    metrics_config = MetricsConfig.from_settings(settings, "storage")  # a bad value fails before anything starts
    with rpc.communicator(ice_args, properties=SERVER_PROPERTIES) as comm, ExitStack() as held:
        gate = guarded_listening(
            comm,
            settings,
            rpc.STORAGE_ADAPTER,
            rpc.STORAGE_ENDPOINTS,
            listen=listen,
            message_size_max_kib=limits.storage_message_kib(settings),
        )
        names_lock = backups_lock(settings, "storage", settings.get_str("storage.backup_name"))
        for lock in [*data_locks(settings), *([names_lock] if names_lock else [])]:
            held.enter_context(lock)
        service = open_service(settings)
        endpoint: MetricsEndpoint | None = None
        backups: PeriodicBackups | None = None

        def shutdown() -> None:
            if backups is not None:
                backups.stop()  # a backup under way finishes before the files close
            service.close()

        try:
            try:
                counts = service.stats()
                log.info(
                    "storage backend %s: %d posts, %d reviews, %d records spooled",
                    counts.backend,
                    counts.posts,
                    counts.reviews,
                    counts.spool_depth,
                )
                if counts.posts < 0:  # the backend did not answer the count (failed, or not within its budget)
                    log.warning(
                        "backend %s at %s did not answer a row count within %.1f s at start (%s): while "
                        "it does not take writes, they are spooled in %s",
                        counts.backend,
                        backend_address(settings),
                        COUNT_BUDGET_S,
                        service.count_error or "down, or slow",
                        settings.get_str("storage.spool_dir"),
                    )
            except StorageUnavailableError as exc:  # the server starts anyway: writes spool until the backend is back
                log.warning("backend not reachable at start: %s", exc)
            files = [path for path, _ in data_files(settings)]
            backups = start_backups(
                settings,
                "storage",
                lambda target: backup_files(files, target),
                "storage files",
                name=settings.get_str("storage.backup_name"),
                lock=names_lock,
            )
            endpoint = _start_metrics(metrics_config, service, backups, data_dirs(settings))
        except BaseException:
            shutdown()  # its replay and backup threads must not keep a failed start-up alive
            raise

        rpc.settle_server_heap()
        try:
            rpc.serve(
                comm,
                rpc.STORAGE_ADAPTER,
                {rpc.STORAGE_IDENTITY: StorageServant(service, gate)},
                rpc.STORAGE_ENDPOINTS,
                on_shutdown=shutdown,
            )
        finally:
            if endpoint is not None:
                endpoint.close()
    return 0


def data_dirs(settings: Settings) -> dict[str, Path]:
    """The directories whose file systems the storage server's /metrics watches: the spool, the embedded store's
    (when it is the backend), and backups when on."""
    dirs = {"spool": Path(settings.get_str("storage.spool_dir"))}
    if settings.get_str("storage.backend") == "embedded":
        dirs["store"] = Path(settings.get_str("storage.embedded.path")).parent
    for key in backup_dir_keys(settings, "storage"):
        dirs["backup"] = Path(settings.get_str(key))
    return dirs


def _start_metrics(
    config: MetricsConfig,
    service: StorageService,
    backups: PeriodicBackups | None = None,
    dirs: dict[str, Path] | None = None,
) -> MetricsEndpoint | None:
    """The storage server's /metrics (``metrics.storage.*``), or None when off. With backups on, their age and
    counts too; with ``dirs``, the free space under each."""
    if config.port == 0:
        return None
    from prometheus_client import CollectorRegistry

    from storage_server.metrics import StorageMetrics

    metrics = StorageMetrics(service)
    registry = CollectorRegistry()
    metrics.register(registry)
    if backups is not None:
        backups.register(registry, "icecrawler_storage")
    if dirs:
        registry.register(ScrapeCollector(lambda: disk_space_families("icecrawler_storage", dirs)))
    service.observer = metrics
    return serve(config, registry)

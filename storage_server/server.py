"""``icecrawler storage``: wire the settings into a ``StorageService`` and serve it on the StorageAdapter."""

from __future__ import annotations

import logging
from contextlib import ExitStack
from pathlib import Path

from icecrawler import rpc
from icecrawler.datalock import DataLock
from icecrawler.errors import StorageUnavailableError
from icecrawler.settings import Settings
from storage_server.integrity import check_store_file, mark_created
from storage_server.servant import StorageServant
from storage_server.service import StorageService

__all__ = ["SERVER_PROPERTIES", "data_locks", "open_service", "run"]

log = logging.getLogger(__name__)

#: Ice defaults of the storage server (deploy/storage.conf or --Ice.* override them): several dispatch threads, so
#: one client's slow batch never queues the others (the store work releases the GIL).
SERVER_PROPERTIES = {
    f"{rpc.STORAGE_ADAPTER}.ThreadPool.Size": "4",
    f"{rpc.STORAGE_ADAPTER}.ThreadPool.SizeMax": "8",
}


def data_locks(settings: Settings) -> list[DataLock]:
    """The locks one storage server holds: its spool directory and, for the embedded backend, its store file."""
    locks = [DataLock(Path(settings.get_str("storage.spool_dir")) / "storage.lock", "storage server")]
    if settings.get_str("storage.backend") == "embedded":
        path = Path(settings.get_str("storage.embedded.path"))
        locks.append(DataLock(path.with_name(path.name + ".lock"), "storage server"))
    return locks


def open_service(settings: Settings) -> StorageService:
    """Check the files (``integrity``), then open the service on them (the caller holds ``data_locks``)."""
    recover = settings.get_bool("storage.recover")
    files = [(Path(settings.get_str("storage.spool_dir")) / "spool.sqlite3", "the spool")]
    if settings.get_str("storage.backend") == "embedded":
        files.append((Path(settings.get_str("storage.embedded.path")), "the embedded store"))
    for path, what in files:
        check_store_file(path, recover, what)
    service = StorageService.from_settings(settings)
    for path, _ in files:
        mark_created(path)
    return service


def run(settings: Settings, ice_args: list[str]) -> int:
    """Serve until SIGTERM/SIGINT. Spooled records left from an earlier run are replayed at once."""
    with ExitStack() as held:
        for lock in data_locks(settings):
            held.enter_context(lock)
        return _serve(open_service(settings), ice_args)


def _serve(service: StorageService, ice_args: list[str]) -> int:
    try:
        counts = service.stats()
        log.info("storage backend %s: %d posts, %d reviews, %d records spooled", counts.backend, counts.posts,
                 counts.reviews, counts.spool_depth)
    except StorageUnavailableError as exc:  # the server starts anyway: writes spool until the backend is back
        log.warning("backend not reachable at start: %s", exc)
    comm = rpc.communicator(ice_args, properties=SERVER_PROPERTIES)
    rpc.settle_server_heap()
    try:
        rpc.serve(comm, rpc.STORAGE_ADAPTER, {rpc.STORAGE_IDENTITY: StorageServant(service)},
                  rpc.STORAGE_ENDPOINTS, on_shutdown=service.close)
    finally:
        comm.destroy()
    return 0

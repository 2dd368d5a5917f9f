"""``icecrawler storage``: wire the settings into a ``StorageService`` and serve it on the StorageAdapter."""

from __future__ import annotations

import gc
import logging

from icecrawler import rpc
from icecrawler.errors import StorageUnavailableError
from icecrawler.settings import Settings
from storage_server.servant import StorageServant
from storage_server.service import StorageService

__all__ = ["GC_THRESHOLDS", "SERVER_PROPERTIES", "run"]

log = logging.getLogger(__name__)

#: Ice defaults of the storage server (deploy/storage.conf or --Ice.* override them): several dispatch threads, so
#: one client's slow batch never queues the others (the store work releases the GIL).
SERVER_PROPERTIES = {
    f"{rpc.STORAGE_ADAPTER}.ThreadPool.Size": "4",
    f"{rpc.STORAGE_ADAPTER}.ThreadPool.SizeMax": "8",
}


#: The server's garbage-collector thresholds. Every write unmarshals ~3 tracked objects per record (the Slice struct,
#: its dict, its pictures list) that die with the call and form no cycles; with Python's default (700, 10, 10) a
#: batch in flight is scanned again and again and promoted, and collection took ~7 % of the server's CPU under
#: ``bench storage`` (perf). Collections still run, just ~70x less often in the young generation.
GC_THRESHOLDS = (50_000, 20, 100)


def run(settings: Settings, ice_args: list[str]) -> int:
    """Serve until SIGTERM/SIGINT. Spooled records left from an earlier run are replayed at once."""
    service = StorageService.from_settings(settings)
    try:
        counts = service.stats()
        log.info("storage backend %s: %d posts, %d reviews, %d records spooled", counts.backend, counts.posts,
                 counts.reviews, counts.spool_depth)
    except StorageUnavailableError as exc:  # the server starts anyway: writes spool until the backend is back
        log.warning("backend not reachable at start: %s", exc)
    comm = rpc.communicator(ice_args, properties=SERVER_PROPERTIES)
    gc.freeze()  # what start-up loaded (modules, Slice types) is never garbage: keep it out of every collection
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        rpc.serve(comm, rpc.STORAGE_ADAPTER, {rpc.STORAGE_IDENTITY: StorageServant(service)},
                  rpc.STORAGE_ENDPOINTS, on_shutdown=service.close)
    finally:
        comm.destroy()
    return 0

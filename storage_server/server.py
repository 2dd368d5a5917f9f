"""``icecrawler storage``: wire the settings into a ``StorageService`` and serve it on the StorageAdapter."""

from __future__ import annotations

import logging

from icecrawler import limits, rpc
from icecrawler.errors import StorageUnavailableError
from icecrawler.security import Gate, has_secure_endpoint
from icecrawler.settings import Settings
from icecrawler.settings.validation import check_paths, validate_values
from storage_server.servant import StorageServant
from storage_server.service import StorageService

__all__ = ["SERVER_PROPERTIES", "run"]

log = logging.getLogger(__name__)

#: Ice defaults of the storage server (deploy/storage.conf or --Ice.* override them): several dispatch threads, so
#: one client's slow batch never queues the others (the store work releases the GIL). The communicator's server
#: pool, not one of the adapter's own (``rpc.create_adapter`` says why).
SERVER_PROPERTIES = {
    "Ice.ThreadPool.Server.Size": "4",
    "Ice.ThreadPool.Server.SizeMax": "8",
}


def run(settings: Settings, ice_args: list[str], listen: str = "") -> int:
    """Serve until SIGTERM/SIGINT. Spooled records left from an earlier run are replayed at once.

    Settings, paths, Ice properties and endpoints are checked before the store is opened (one-line errors,
    ``icecrawler.cli``); ``listen`` overrides the adapter's endpoints.
    """
    validate_values(settings.as_dict())
    embedded = settings.get_str("storage.backend") == "embedded"
    check_paths(settings.as_dict(), dirs=["storage.spool_dir"], files=["storage.embedded.path"] if embedded else [])
    with rpc.communicator(ice_args, properties=SERVER_PROPERTIES) as comm:
        endpoints = rpc.prepare_adapter(comm, rpc.STORAGE_ADAPTER, rpc.STORAGE_ENDPOINTS, endpoints=listen,
                                        allow_insecure=settings.get_bool("security.allow_insecure"),
                                        message_size_max_kib=limits.storage_message_kib(settings))
        gate = Gate.from_setting(settings.get_str("security.revoked"), tls=has_secure_endpoint(comm, endpoints))
        service = StorageService.from_settings(settings)
        try:
            counts = service.stats()
            log.info("storage backend %s: %d posts, %d reviews, %d records spooled", counts.backend, counts.posts,
                     counts.reviews, counts.spool_depth)
        except StorageUnavailableError as exc:  # the server starts anyway: writes spool until the backend is back
            log.warning("backend not reachable at start: %s", exc)
        except BaseException:
            service.close()  # its replay thread must not keep a failed start-up alive
            raise
        rpc.settle_server_heap()
        rpc.serve(comm, rpc.STORAGE_ADAPTER, {rpc.STORAGE_IDENTITY: StorageServant(service, gate)},
                  rpc.STORAGE_ENDPOINTS, on_shutdown=service.close)
    return 0

"""``icecrawler storage``: wire the settings into a ``StorageService`` and serve it on the StorageAdapter."""

from __future__ import annotations

import logging

from icecrawler import rpc
from icecrawler.errors import StorageUnavailableError
from icecrawler.metrics import MetricsConfig, MetricsEndpoint, serve
from icecrawler.settings import Settings
from storage_server.servant import StorageServant
from storage_server.service import StorageService

__all__ = ["SERVER_PROPERTIES", "run"]

log = logging.getLogger(__name__)

#: Ice defaults of the storage server (deploy/storage.conf or --Ice.* override them): several dispatch threads, so
#: one client's slow batch never queues the others (the store work releases the GIL).
SERVER_PROPERTIES = {
    f"{rpc.STORAGE_ADAPTER}.ThreadPool.Size": "4",
    f"{rpc.STORAGE_ADAPTER}.ThreadPool.SizeMax": "8",
}


def run(settings: Settings, ice_args: list[str]) -> int:
    """Serve until SIGTERM/SIGINT. Spooled records left from an earlier run are replayed at once."""
    metrics_config = MetricsConfig.from_settings(settings, "storage")  # a bad value fails before anything starts
    service = StorageService.from_settings(settings)
    try:
        counts = service.stats()
        log.info("storage backend %s: %d posts, %d reviews, %d records spooled", counts.backend, counts.posts,
                 counts.reviews, counts.spool_depth)
    except StorageUnavailableError as exc:  # the server starts anyway: writes spool until the backend is back
        log.warning("backend not reachable at start: %s", exc)
    endpoint = _start_metrics(metrics_config, service)
    comm = rpc.communicator(ice_args, properties=SERVER_PROPERTIES)
    rpc.settle_server_heap()
    try:
        rpc.serve(comm, rpc.STORAGE_ADAPTER, {rpc.STORAGE_IDENTITY: StorageServant(service)},
                  rpc.STORAGE_ENDPOINTS, on_shutdown=service.close)
    finally:
        comm.destroy()
        if endpoint is not None:
            endpoint.close()
    return 0


def _start_metrics(config: MetricsConfig, service: StorageService) -> MetricsEndpoint | None:
    """The storage server's /metrics (``metrics.storage.*``), or None when off."""
    if config.port == 0:
        return None
    from prometheus_client import CollectorRegistry

    from storage_server.metrics import StorageMetrics

    metrics = StorageMetrics(service)
    registry = CollectorRegistry()
    metrics.register(registry)
    service.observer = metrics
    return serve(config, registry)

"""``icecrawler client``: the crawler worker daemon (see ``crawler_client.daemon``)."""

from __future__ import annotations

import argparse
import logging
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from icecrawler import rpc
from icecrawler.clock import Clock
from icecrawler.metrics import MetricsConfig, MetricsEndpoint, serve
from icecrawler.settings import Settings
from icecrawler_cli.commands import BaseCommand

if TYPE_CHECKING:
    from crawler_client.daemon import ClientDaemon

log = logging.getLogger("icecrawler.client")


class Command(BaseCommand):
    summary = "run a crawler client: lease tasks, crawl, store records, report (until SIGTERM/SIGINT)"
    description = (
        "Run one crawler client process with client.workers crawl threads. It finds the servers through the Ice "
        "properties Scheduler.Proxy and Storage.Proxy (defaults: 127.0.0.1:10000 and :10001; see "
        "deploy/client.conf), leases due tasks in batches of client.batch, crawls each one incrementally (newest "
        "first, stopping at the task's cursor, at most client.max_pages pages), stores the new records, then "
        "reports the outcome and fingerprint. Storage or scheduler outages are buffered (client.buffer_records) "
        "and retried with backoff.\n\n"
        "SIGTERM or SIGINT stops it cleanly: no new leases, queued tasks are given back (releaseUsers), running "
        "crawls get client.shutdown_grace_s to finish and be reported, everything else is given back; a server that "
        "does not answer holds the stop no longer than that grace period and about ten seconds.\n\n"
        "Progress (tasks crawled and reported, items stored, per-outcome counts) is logged every "
        "client.progress_log_s seconds.\n\n"
        "Useful settings (--set KEY=VALUE): client.workers, client.batch, client.max_pages, client.timeout_s, "
        "client.retries, client.max_body_bytes, sources.<name>.base_url, sources.ecshop.username/password; "
        "`icecrawler settings` lists every setting with its value and where it came from (each one is described "
        "in icecrawler/settings/default_settings.py, a source's in docs/SOURCES.md). Give the client the same "
        "--config file as the scheduler: its sources.* values must match (docs/DEPLOY.md)."
    )
    takes_ice_args = True

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--worker-id",
            default=None,
            metavar="ID",
            help="name this client reports to the scheduler (default: HOST:PID)",
        )

    def run(self, args: argparse.Namespace, settings: Settings, ice_args: list[str]) -> int:
        from crawler_client.daemon import ClientDaemon, DaemonConfig
        from crawler_client.gateways import CLIENT_PROPERTIES, CallCutoff, IceStorage, scheduler_gateway
        from crawler_client.hostcheck import start_host_check
        from crawler_client.runner import RunnerConfig, TaskRunner
        from shhd.fingerprint import fingerprint_texts

        config = DaemonConfig.from_settings(settings)
        metrics_config = MetricsConfig.from_settings(settings, "client")  # a bad value fails before anything starts
        runner_config = RunnerConfig.from_settings(settings)
        Clock.check_shared_origin(settings, "client")
        clock = Clock.from_settings(settings)
        # jieba loads its dictionary on first use (about a second of CPU, GIL held): pay it before leasing, not
        # while the first leases tick.
        fingerprint_texts(["预热"])

        def fingerprint(texts: Iterable[str]) -> int:
            return int(fingerprint_texts(texts))

        def runner_factory(cancel: threading.Event) -> TaskRunner:
            return TaskRunner(runner_config, runner_config.make_source, clock=clock, cancel=cancel)

        stop_requested = threading.Event()
        with rpc.stop_on_signals(stop_requested), rpc.communicator(ice_args, CLIENT_PROPERTIES) as comm:
            start_host_check(rpc.scheduler_proxies(comm), settings, stop_requested)
            cutoff = CallCutoff()  # the stop ends calls a server leaves unanswered (the daemon reads it from these)
            daemon = ClientDaemon(
                scheduler_gateway(comm, settings, cutoff),
                IceStorage(rpc.storage_proxy(comm), cutoff),
                config,
                runner_factory,
                clock=clock,
                fingerprint=fingerprint,
                worker_id=args.worker_id,
            )
            log.info(
                "scheduler: %s; storage: %s", "; ".join(map(str, rpc.scheduler_proxies(comm))), rpc.storage_proxy(comm)
            )
            endpoint = _start_metrics(metrics_config, daemon)
            try:
                daemon.run_until(stop_requested)
            finally:
                if endpoint is not None:
                    endpoint.close()
        return 0


def _start_metrics(config: MetricsConfig, daemon: ClientDaemon) -> MetricsEndpoint | None:
    """The client's /metrics (``metrics.client.*``: the first free port of the span), or None when off."""
    if config.port == 0:
        return None
    from prometheus_client import CollectorRegistry

    from crawler_client import observer
    from crawler_client.metrics import ClientMetrics
    from shhd.fingerprint import cache_usage

    metrics = ClientMetrics(daemon, caches=cache_usage)
    registry = CollectorRegistry()
    metrics.register(registry)
    observer.install(metrics)
    return serve(config, registry)

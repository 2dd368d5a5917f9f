"""``icecrawler scheduler``: run the scheduler daemon (Berkeley DB queues, leases, politeness, accounts)."""

from __future__ import annotations

import argparse

from icecrawler.settings import Settings
from icecrawler_cli.commands import BaseCommand


class Command(BaseCommand):
    summary = "run the scheduler server (task queues in Berkeley DB, leases, politeness, account pool)"
    description = (
        "Serve Crawler::Scheduler (adapter SchedulerAdapter, identity 'scheduler', default endpoints "
        "tcp -h 127.0.0.1 -p 10000) until SIGTERM/SIGINT. State lives in scheduler.db_dir and is "
        "recovered on start. To use more cores, run it as N shards (--set scheduler.shards=N --set "
        "scheduler.shard=K, each with its own db_dir and endpoints; docs/DEPLOY.md). Example: "
        "icecrawler scheduler --Ice.Config=deploy/scheduler.conf --set scheduler.host_spacing_s=1"
    )
    takes_ice_args = True

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--recover",
            action="store_true",
            help="start on a queue database whose logs are missing or that fails its check: move "
            "it aside and copy every readable record into a new one (setting "
            "scheduler.recover)",
        )
        parser.add_argument(
            "--listen",
            default="",
            metavar="ENDPOINTS",
            help="Ice endpoints to listen on, e.g. 'tcp -h 127.0.0.1 -p 10000' or 'ssl -h 10.0.0.5 -p "
            "10000' (overrides SchedulerAdapter.Endpoints of --Ice.Config)",
        )

    def run(self, args: argparse.Namespace, settings: Settings, ice_args: list[str]) -> int:
        from scheduler_server.server import run

        if args.recover:
            settings.set("scheduler.recover", True)
        return run(settings, ice_args, listen=args.listen)

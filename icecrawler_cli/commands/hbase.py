"""``icecrawler hbase start|stop|status``: the local standalone HBase + Thrift1 server (deploy/hbase)."""

from __future__ import annotations

import argparse
import json

from icecrawler.settings import Settings
from icecrawler_cli.commands import BaseCommand
from icecrawler_local.hbase_local import LocalHBase  # source checkout only: the command says so when missing


class Command(BaseCommand):
    summary = "start, stop or probe the local standalone HBase + Thrift server (deploy/hbase)"
    description = (
        "A real HBase 2.6 (master, region server and ZooKeeper in one JVM, local file system) plus its Thrift1\n"
        "server, assembled from Maven Central jars into hbase.dir (default var/hbase) on first start.\n"
        "Loopback only, web UIs off. `start` is idempotent and waits (at most hbase.start_timeout_s) until a\n"
        "table call works through happybase; `stop` shuts both JVMs down (SIGKILL after a bound).\n\n"
        "  icecrawler hbase start\n"
        "  icecrawler storage --set storage.backend=hbase\n"
        "  icecrawler hbase stop"
    )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "action",
            choices=["start", "stop", "status"],
            help="start (assemble on first use, then wait until a table call works), stop, or status (pids, and "
            "whether a table call works through Thrift)",
        )

    def run(self, args: argparse.Namespace, settings: Settings, ice_args: list[str]) -> int:
        hbase = LocalHBase.from_settings(settings)
        if args.action == "start":
            print(hbase.start())
        elif args.action == "stop":
            print(hbase.stop())
        else:
            status = hbase.status()
            print(json.dumps(status, indent=2))
            return 0 if status["answering"] else 1
        return 0

"""``icecrawler storage``: the storage Ice server (records into the embedded store or HBase)."""

from __future__ import annotations

import argparse

from icecrawler.settings import Settings
from icecrawler_cli.commands import BaseCommand


class Command(BaseCommand):
    summary = "run the storage server (embedded SQLite store by default, or HBase)"
    description = (
        "Serves Crawler::Storage (writeWB, writeReviews, stats) on the StorageAdapter, default\n"
        "tcp -h 127.0.0.1 -p 10001. Records go to storage.backend: 'embedded' (SQLite at storage.embedded.path,\n"
        "no server needed) or 'hbase' (Thrift at storage.hbase.host:port; `icecrawler hbase start` runs one\n"
        "locally). While the backend is down or slower than storage.write_timeout_s, writes are spooled durably\n"
        "in storage.spool_dir and replayed in order when it is back.\n\n"
        "  icecrawler storage --Ice.Config=deploy/storage.conf\n"
        "  icecrawler storage --set storage.backend=hbase"
    )
    takes_ice_args = True

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--recover",
            action="store_true",
            help="start on a damaged, emptied or vanished store or spool: move a damaged file "
            "aside and copy its readable rows into a new one; begin a vanished store anew "
            "(setting storage.recover)",
        )
        parser.add_argument(
            "--listen",
            default="",
            metavar="ENDPOINTS",
            help="Ice endpoints to listen on, e.g. 'tcp -h 127.0.0.1 -p 10001' or 'ssl -h 10.0.0.5 -p "
            "10001' (overrides StorageAdapter.Endpoints of --Ice.Config)",
        )

    def run(self, args: argparse.Namespace, settings: Settings, ice_args: list[str]) -> int:
        from storage_server.server import run

        if args.recover:
            settings.set("storage.recover", True)
        return run(settings, ice_args, listen=args.listen)

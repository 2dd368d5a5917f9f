"""``icecrawler storage``: the storage Ice server (records into the embedded store or HBase)."""

from __future__ import annotations

from icecrawler.settings import Settings
from icecrawler_cli.commands import DaemonCommand


class Command(DaemonCommand):
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
    role = "storage"
    adapter = "StorageAdapter"
    default_port = 10001
    recover_help = (
        "start on a damaged, emptied or vanished store or spool: move a damaged file aside and copy its readable "
        "rows into a new one (finishing such a rebuild that was stopped); begin a vanished store anew"
    )

    def serve(self, settings: Settings, ice_args: list[str], listen: str) -> int:
        from storage_server.server import run

        return run(settings, ice_args, listen=listen)

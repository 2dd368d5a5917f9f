"""``icecrawler export``: stream stored posts or reviews as JSON lines or CSV, with progress on stderr."""

from __future__ import annotations

import argparse
import sys
import time

from icecrawler.commands import BaseCommand
from icecrawler.settings import Settings


class Command(BaseCommand):
    summary = "export stored posts or reviews (JSON lines or CSV) from the embedded store or HBase"
    description = (
        "Reads the backend named by storage.backend directly (no storage server needed), in row-key order\n"
        "(one user's / product's records together, newest first), and streams to stdout or --output.\n\n"
        "  icecrawler export --table weibo > weibo.jsonl\n"
        "  icecrawler export --table review --format csv --since 2024-05-01T00:00:00+08:00 -o reviews.csv\n"
        "  icecrawler export --table weibo --set storage.backend=hbase"
    )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--table", required=True, choices=["weibo", "review"])
        parser.add_argument("--format", default="jsonl", choices=["jsonl", "csv"], dest="fmt")
        parser.add_argument("--since", default="", metavar="TIME",
                            help="only records fetched at or after TIME (ISO 8601 with offset)")
        parser.add_argument("-o", "--output", default="-", help="output file (default: stdout)")
        parser.add_argument("--no-progress", action="store_true", help="no progress line on stderr")

    def run(self, args: argparse.Namespace, settings: Settings, ice_args: list[str]) -> int:
        from storage_server.export import export
        from storage_server.service import build_store

        store = build_store(settings)
        started = time.monotonic()

        def progress(count: int) -> None:
            if not args.no_progress:
                rate = count / max(time.monotonic() - started, 1e-6)
                print(f"\rexport {args.table}: {count:,} records ({rate:,.0f}/s)", end="", file=sys.stderr,
                      flush=True)

        try:
            if args.output == "-":
                count = export(store, args.table, sys.stdout, args.fmt, args.since, progress)
            else:
                with open(args.output, "w", encoding="utf-8", newline="") as out:
                    count = export(store, args.table, out, args.fmt, args.since, progress)
        finally:
            store.close()
        if not args.no_progress:
            print(f"\rexport {args.table}: {count:,} records, done", file=sys.stderr)
        return 0

"""``icecrawler purge``: delete one user's posts or one product's reviews from the store (a takedown request)."""

from __future__ import annotations

import argparse
from pathlib import Path

from icecrawler.errors import ConfigError
from icecrawler.settings import Settings
from icecrawler_cli.commands import BaseCommand
from icecrawler_cli.commands.export import add_table_and_owner, open_existing_store


class Command(BaseCommand):
    summary = "delete one user's posts or one product's reviews from the store (a takedown)"
    description = (
        "Deletes every stored record of one owner from the backend named by storage.backend (embedded store or\n"
        "HBase), read and written directly, as icecrawler export reads it. Without --yes it only counts them.\n\n"
        "  icecrawler remove weibo_web:1669879400 weibo_mobile:1669879400   # stop crawling the user first\n"
        "  icecrawler purge --table weibo --owner 1669879400                # how many would go\n"
        "  icecrawler purge --table weibo --owner 1669879400 --yes\n\n"
        "It refuses while the storage spool holds records the backend has not taken yet (they would be written\n"
        "after the purge). With several storage replicas, each with its own embedded store, run it on each."
    )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        add_table_and_owner(parser, "whose records: the user id (weibo) or the product id (review)", True)
        parser.add_argument("--yes", action="store_true", help="delete them (without it: count only)")

    def run(self, args: argparse.Namespace, settings: Settings, ice_args: list[str]) -> int:
        from storage_server.export import owner_key_prefix
        from storage_server.spool import SqliteSpool

        prefix = owner_key_prefix(args.table, args.owner)
        spool_file = Path(settings.get_str("storage.spool_dir")) / "spool.sqlite3"
        if spool_file.is_file():
            spool = SqliteSpool(spool_file.parent)
            try:
                waiting = spool.depth()
            finally:
                spool.close()
            if waiting:
                raise ConfigError(
                    f"the storage spool ({spool_file}) holds {waiting} record(s) the backend has not taken yet; "
                    "they could include this owner's and would be written after the purge: run it once the "
                    "spool is empty (icecrawler status shows it)"
                )
        store = open_existing_store(settings, "purge")
        try:
            if not args.yes:
                count = sum(1 for _ in store.scan(args.table, prefix))
                print(f"{count} {args.table} record(s) of {args.owner} would be deleted; run again with --yes")
                return 0
            deleted = store.delete_prefix(args.table, prefix)
        finally:
            store.close()
        print(f"deleted {deleted} {args.table} record(s) of {args.owner}")
        return 0

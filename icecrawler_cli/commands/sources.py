"""``icecrawler sources``: the sources this install knows, as the registry found them, and what each declares."""

from __future__ import annotations

import argparse
import json

from icecrawler.settings import Settings
from icecrawler_cli.commands import BaseCommand


class Command(BaseCommand):
    summary = "list the registered sources: task kinds, storage table, login, site URL and sandbox prefix"
    description = (
        "List every source the registry finds (the modules of crawler_client/sources that define SOURCE, and "
        "those named in ICECRAWLER_SOURCE_MODULES) with what its spec declares: the task kinds it crawls (the "
        "first is what a bare `icecrawler seed <source>:<target>` means), the storage table its items go to, how "
        "it logs in, the site URL in effect (sources.<name>.base_url) and its sandbox site prefix. "
        "CONTRIBUTING.md, 'Adding a source', says how to add one."
    )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true", help="print one JSON object per source instead of a table")

    def run(self, args: argparse.Namespace, settings: Settings, ice_args: list[str]) -> int:
        from icecrawler.sourcespec import registry

        rows = []
        for name in sorted(registry):
            spec = registry.spec(name)
            kinds = [spec.default_kind.value, *sorted(k.value for k in spec.kinds if k is not spec.default_kind)]
            rows.append(
                {
                    "source": name,
                    "kinds": kinds,
                    "table": spec.table,
                    "login": spec.login or "none",
                    "base_url": settings.get_str(f"sources.{name}.base_url"),
                    "sandbox_site": spec.sandbox_site,
                    "module": registry.module(name).__name__,
                }
            )
        if args.json:
            for row in rows:
                print(json.dumps(row, ensure_ascii=False))
            return 0
        header = ("source", "kinds", "table", "login", "base_url", "sandbox")
        table = [header] + [
            (r["source"], ",".join(r["kinds"]), r["table"], r["login"], r["base_url"], r["sandbox_site"] or "-")
            for r in rows
        ]
        widths = [max(len(str(line[i])) for line in table) for i in range(len(header))]
        for line in table:
            print("  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())
        return 0

"""``icecrawler settings``: print every effective setting and where its value came from."""

from __future__ import annotations

import argparse
import json

from icecrawler.settings import Settings
from icecrawler_cli.commands import BaseCommand


class Command(BaseCommand):
    summary = "print the effective settings (defaults < file < env < --set) and their origin"
    description = (
        "Print every setting with its value in effect and where that came from: default, file (-c FILE, else "
        "./icecrawler.toml), env (ICECRAWLER_<SECTION>__<KEY>, e.g. ICECRAWLER_CLIENT__WORKERS=8) or cmdline (--set). "
        "What each one does is the comment above it in icecrawler/settings/default_settings.py; a source's "
        "sources.<name>.* settings are in docs/SOURCES.md.\n\n"
        "  icecrawler settings -c /etc/icecrawler/icecrawler.toml\n"
        "  icecrawler settings --set client.workers=8 --json"
    )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")

    def run(self, args: argparse.Namespace, settings: Settings, ice_args: list[str]) -> int:
        values = settings.include_sources().as_dict()
        if args.json:
            print(json.dumps(values, indent=2, sort_keys=True))
            return 0
        width = max(map(len, values))
        for key in sorted(values):
            print(f"{key:<{width}}  {values[key]!r:<40}  ({settings.source_of(key)})")
        return 0

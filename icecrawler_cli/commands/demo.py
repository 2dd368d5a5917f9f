"""``icecrawler demo``: the demo application of ``icecrawler_local.demo`` (source checkout only)."""

from __future__ import annotations

import argparse

from icecrawler.settings import Settings
from icecrawler_cli.commands import BaseCommand
from icecrawler_local.demo import Demo


class Command(BaseCommand):
    summary = Demo.summary
    description = Demo.description

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        Demo().add_options(parser)

    def run(self, args: argparse.Namespace, settings: Settings, ice_args: list[str]) -> int:
        return Demo().run(args)

"""``icecrawler bench NAME [ARGS...]``: run ``bench/NAME.py`` (each benchmark prints a table and writes
``docs/bench/NAME.json``). ``icecrawler bench list`` shows what exists; ``icecrawler bench all`` runs each of them
with its defaults (``make bench``)."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import bench
from icecrawler.processes import interrupts_once
from icecrawler.settings import Settings
from icecrawler_cli.commands import BaseCommand


def available() -> list[str]:
    return sorted(module.name for module in pkgutil.iter_modules(bench.__path__) if not module.name.startswith("_"))


class Command(BaseCommand):
    summary = "run a benchmark from bench/ (scheduler, storage, client, revisit, scale, ...)"
    description = (
        "Run one benchmark. Each prints a table next to a baseline measured in the same run and writes "
        "its headline figures to docs/bench/NAME.json. `icecrawler bench list` lists them; "
        "`icecrawler bench NAME --help` shows a benchmark's own options. Ctrl-C or SIGTERM stops every process "
        "the benchmark started (exit code 130)."
    )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("name", help="benchmark name, 'list', or 'all' (each benchmark with its defaults)")
        parser.add_argument("bench_args", nargs=argparse.REMAINDER, help="options passed to the benchmark")

    def run(self, args: argparse.Namespace, settings: Settings, ice_args: list[str]) -> int:
        try:
            with interrupts_once():
                return self._run(args)
        except KeyboardInterrupt:
            print("\ninterrupted: every process the benchmark started has been stopped", flush=True)
            return 130

    def _run(self, args: argparse.Namespace) -> int:
        """Benchmarks start daemons (``icecrawler_local``); the caller turns SIGTERM into KeyboardInterrupt so
        their ``with`` blocks stop them."""
        names = available()
        if args.name == "list":
            print("\n".join(names))
            return 0
        if args.name == "all":
            if args.bench_args:
                print(
                    "icecrawler bench: error: all takes no options (each benchmark runs with its defaults)",
                    file=sys.stderr,
                )
                return 2
            return max((int(importlib.import_module(f"bench.{name}").main([])) for name in names), default=0)
        if args.name not in names:
            available_names = ", ".join(names) or "none"
            print(
                f"icecrawler bench: error: unknown benchmark {args.name!r}; available: {available_names}",
                file=sys.stderr,
            )
            return 2
        module = importlib.import_module(f"bench.{args.name}")
        return int(module.main(list(args.bench_args)))

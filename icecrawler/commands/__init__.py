"""One module per ``icecrawler`` subcommand, each with a ``Command`` class (Scrapy's commands/ layout).

To add a subcommand, write ``icecrawler/commands/<name>.py`` with ``class Command(BaseCommand)`` and list the
module in ``COMMAND_MODULES``; ``icecrawler.cli`` does the rest.
"""

from __future__ import annotations

import argparse
from typing import ClassVar

from icecrawler.settings import Settings

__all__ = ["COMMAND_MODULES", "BaseCommand", "NotImplementedYet"]

#: Subcommands in the order ``--help`` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "scheduler",
    "storage",
    "client",
    "seed",
    "status",
    "tasks",
    "export",
    "parse",
    "demo",
    "bench",
    "hbase",
    "certs",
    "settings",
    "sandbox",
    "targets",
)


class BaseCommand:
    """A subcommand: ``add_options`` declares its flags, ``run`` does the work and returns the exit code."""

    #: One line for ``icecrawler --help``.
    summary: ClassVar[str] = ""
    #: Longer text for ``icecrawler <name> --help``.
    description: ClassVar[str] = ""
    #: Whether the command accepts ``--Ice.*`` / ``--IceSSL.*`` arguments (passed to the communicator).
    takes_ice_args: ClassVar[bool] = False

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        """Declare the command's own options."""

    def run(self, args: argparse.Namespace, settings: Settings, ice_args: list[str]) -> int:
        raise NotImplementedError


class NotImplementedYet(BaseCommand):
    """Placeholder for a subcommand whose role is not built yet: a clear message and exit code 2."""

    def run(self, args: argparse.Namespace, settings: Settings, ice_args: list[str]) -> int:
        import sys

        print(f"icecrawler: '{type(self).__module__.rsplit('.', 1)[-1]}' is not implemented yet", file=sys.stderr)
        return 2

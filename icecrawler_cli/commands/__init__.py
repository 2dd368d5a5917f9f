"""One module per ``icecrawler`` subcommand, each with a ``Command`` class (Scrapy's commands/ layout).

To add a subcommand, write ``icecrawler_cli/commands/<name>.py`` with ``class Command(BaseCommand)`` and list the
module in ``COMMAND_MODULES``; ``icecrawler_cli.cli`` does the rest.
"""

from __future__ import annotations

import argparse
from typing import ClassVar

from icecrawler.errors import MissingPartError
from icecrawler.settings import Settings

__all__ = ["COMMAND_MODULES", "BaseCommand", "Unavailable"]

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


class Unavailable(BaseCommand):
    """Stands in for a subcommand this install cannot run (see ``icecrawler.optional``): it is still listed, and
    running it raises the error that names what is missing."""

    summary = "not available in this install (run it to see what is missing)"

    def __init__(self, error: MissingPartError) -> None:
        self.error = error

    def run(self, args: argparse.Namespace, settings: Settings, ice_args: list[str]) -> int:
        raise self.error

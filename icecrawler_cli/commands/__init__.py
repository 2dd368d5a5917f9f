"""One module per ``icecrawler`` subcommand, each with a ``Command`` class (Scrapy's commands/ layout).

To add a subcommand, write ``icecrawler_cli/commands/<name>.py`` with ``class Command(BaseCommand)`` and list the
module in ``COMMAND_MODULES``; ``icecrawler_cli.cli`` does the rest.
"""

from __future__ import annotations

import argparse
from typing import ClassVar

from icecrawler.errors import MissingPartError
from icecrawler.settings import Settings

__all__ = ["COMMAND_MODULES", "SERVES_UNTIL_STOPPED", "BaseCommand", "Unavailable"]

#: Subcommands in the order ``--help`` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "scheduler",
    "storage",
    "client",
    "seed",
    "remove",
    "hold",
    "status",
    "tasks",
    "reshard",
    "export",
    "purge",
    "parse",
    "demo",
    "bench",
    "hbase",
    "certs",
    "settings",
    "sources",
    "sandbox",
    "targets",
)

#: Commands that serve until SIGTERM/SIGINT: ``icecrawler_cli.cli`` holds those signals from its first step, so
#: one that comes during start-up stops the command in order once it serves (``icecrawler.stopsignals``).
SERVES_UNTIL_STOPPED = frozenset({"scheduler", "storage", "client", "targets"})


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


class DaemonCommand(BaseCommand):
    """A server daemon's command: ``--recover`` and ``--listen``, then the role's ``run(settings, ice_args,
    listen=...)``. A role only names itself, its adapter and port, what recovery does, and how to serve."""

    takes_ice_args = True
    #: The settings prefix and the adapter the daemon serves (``scheduler`` / ``SchedulerAdapter``).
    role: ClassVar[str] = ""
    adapter: ClassVar[str] = ""
    default_port: ClassVar[int] = 0
    #: What ``--recover`` does to this role's data.
    recover_help: ClassVar[str] = ""

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--recover", action="store_true", help=f"{self.recover_help} (setting {self.role}.recover)")
        port = self.default_port
        parser.add_argument(
            "--listen",
            default="",
            metavar="ENDPOINTS",
            help=f"Ice endpoints to listen on, e.g. 'tcp -h 127.0.0.1 -p {port}' or 'ssl -h 10.0.0.5 -p {port}' "
            f"(overrides {self.adapter}.Endpoints of --Ice.Config)",
        )

    def run(self, args: argparse.Namespace, settings: Settings, ice_args: list[str]) -> int:
        if args.recover:
            settings.set(f"{self.role}.recover", True)
        return self.serve(settings, ice_args, args.listen)

    def serve(self, settings: Settings, ice_args: list[str], listen: str) -> int:
        """Import the role's server (only now: other commands need not load it) and run it."""
        raise NotImplementedError


class Unavailable(BaseCommand):
    """Stands in for a subcommand this install cannot run (see ``icecrawler.optional``): it is still listed, and
    running it raises the error that names what is missing."""

    summary = "not available in this install (run it to see what is missing)"

    def __init__(self, error: MissingPartError) -> None:
        self.error = error

    def run(self, args: argparse.Namespace, settings: Settings, ice_args: list[str]) -> int:
        raise self.error

"""``python -m scheduler_server [-c FILE] [--set KEY=VALUE ...] [--Ice.Config=FILE ...]``: the scheduler daemon
without loading every other subcommand of the CLI, so a supervisor (or the kill -9 test) restarts it in about
half the time of ``icecrawler scheduler``. Same settings layering, logging and server code."""

from __future__ import annotations

import argparse
import sys

from icecrawler.cli import ICE_PREFIXES, failure_line
from icecrawler.logs import configure_logging
from icecrawler.settings import load_settings
from scheduler_server.server import run


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduler_server", description=__doc__)
    parser.add_argument("-c", "--config", metavar="FILE")
    parser.add_argument("-s", "--set", dest="assignments", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args([arg for arg in argv if not arg.startswith(ICE_PREFIXES)])
    try:
        settings = load_settings(args.config, args.assignments)
        configure_logging(settings.get_str("log.level"), settings.get_bool("log.json"))
        return run(settings, [arg for arg in argv if arg.startswith(ICE_PREFIXES)])
    except Exception as exc:  # one line for what the operator can fix (icecrawler.cli), a traceback for a bug
        line = failure_line(exc)
        if line is None:
            raise
        print(f"scheduler: error: {line}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

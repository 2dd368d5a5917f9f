"""``icecrawler targets``: write Prometheus file-SD target lists of the running daemons (``icecrawler.targets``)."""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

from icecrawler import rpc
from icecrawler.durable import WriteInProgress
from icecrawler.settings import Settings
from icecrawler.targets import PROBE_TIMEOUT_S, STICKY_ROLES, discover, keep_listed, listed, write_targets
from icecrawler_cli.commands import BaseCommand


class Command(BaseCommand):
    summary = "write Prometheus file-SD target lists of the daemons answering /metrics on the given hosts"
    description = (
        "Probe every port the metrics.<role>.port / port_span settings allow (scheduler shards: port + shard) on "
        "each --hosts entry, and write <dir>/scheduler.json, storage.json and client.json in Prometheus' file-SD "
        "format with the daemons that answered. A scheduler or storage server once listed stays listed when it "
        "stops answering (so that Prometheus sees it down and IcecrawlerTargetDown fires); --forget HOST:PORT "
        "drops one taken out of service. Clients are listed only while they answer. Prometheus reads the files as "
        "deploy/prometheus/prometheus.yml says and picks up changes by itself. With --every it probes again every "
        "so many seconds until SIGTERM/SIGINT."
    )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--hosts", default="127.0.0.1", help="comma-separated hosts to probe (default: %(default)s)"
        )
        parser.add_argument(
            "--dir",
            default="deploy/prometheus/targets",
            type=Path,
            help="where the <role>.json files go (default: %(default)s, relative to the current directory; give the "
            "targets/ folder next to your prometheus.yml)",
        )
        parser.add_argument(
            "--forget",
            action="append",
            default=[],
            metavar="HOST:PORT",
            help="drop this scheduler or storage server from the lists (taken out of service); repeatable",
        )
        parser.add_argument(
            "--every",
            type=_interval_seconds,
            default=0.0,
            metavar="SECONDS",
            help="probe again every SECONDS (default 0: probe once and exit)",
        )
        parser.add_argument(
            "--timeout",
            type=_positive_seconds,
            default=PROBE_TIMEOUT_S,
            metavar="SECONDS",
            help="how long each probe waits for /metrics to answer (default: %(default)s); a daemon that does not "
            "answer in time is left out of the lists, and Prometheus stops scraping it",
        )

    def run(self, args: argparse.Namespace, settings: Settings, ice_args: list[str]) -> int:
        hosts = [host.strip() for host in args.hosts.split(",") if host.strip()]
        if not hosts:
            print("icecrawler targets: --hosts names no host", file=sys.stderr)
            return 2
        stop = threading.Event()
        # Checked once, against the lists as they were: after the first round a forgotten target is gone from them.
        sticky = {target for role in STICKY_ROLES for target in listed(args.dir, role)}
        unknown = [target for target in args.forget if target not in sticky]
        if unknown:
            print(f"icecrawler targets: --forget {', '.join(unknown)}: not in the lists", file=sys.stderr)
        with rpc.stop_on_signals(stop):
            while True:
                found = discover(settings, hosts, args.timeout)
                answering = [target for target in args.forget if any(target in found[role] for role in STICKY_ROLES)]
                if answering:
                    print(
                        f"icecrawler targets: --forget {', '.join(answering)}: it answers /metrics, so it stays listed "
                        "(stop the daemon first; --forget is for one taken out of service)",
                        file=sys.stderr,
                    )
                lists, silent, unprobed = keep_listed(args.dir, found, hosts, args.forget)
                try:
                    write_targets(args.dir, lists)
                except WriteInProgress as exc:
                    if args.every <= 0:
                        raise  # one run: exit 2 and say why (``icecrawler_cli.cli``)
                    # A --forget run on the same folder, say: the loop must not die of it (client targets would
                    # stop following the clients), and its next round writes the lists again.
                    print(f"icecrawler targets: {exc}; writing again in {args.every:g}s", file=sys.stderr, flush=True)
                line = " ".join(f"{role}={len(targets)}" for role, targets in found.items())
                down = [f"{role} {target}" for role, targets in silent.items() for target in targets]
                if down:
                    line += f"; listed but not answering: {', '.join(down)} (--forget HOST:PORT if retired)"
                other = [f"{role} {target}" for role, targets in unprobed.items() for target in targets]
                if other:
                    line += f"; kept, not on --hosts: {', '.join(other)}"
                print(line, flush=True)
                if args.every <= 0 or stop.wait(args.every):
                    return 0


def _seconds(text: str, zero: str = "") -> float:
    """A finite number of seconds above 0 (or 0 itself when ``zero`` says what it means); a bad value exits 2 with
    the reason."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if zero and seconds == 0:
        return seconds
    if not seconds > 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(
            f"{text} seconds: give {f'0 ({zero}) or ' if zero else ''}a finite time above 0"
        )
    return seconds


def _positive_seconds(text: str) -> float:
    """An argparse type for a probe timeout."""
    return _seconds(text)


def _interval_seconds(text: str) -> float:
    """An argparse type for ``--every``: 0 is one round."""
    return _seconds(text, zero="once")

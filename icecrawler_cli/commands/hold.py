"""``icecrawler hold``: stop leasing one host's tasks for a while (holdHost), or lift a hold or a ban early."""

from __future__ import annotations

import argparse
import re

from icecrawler import rpc
from icecrawler.errors import ConfigError
from icecrawler.settings import Settings
from icecrawler_cli.commands import BaseCommand

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``6h`` or ``2d`` as seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if match is None:
        raise ConfigError(f"--for {text!r}: give a number of seconds, or a number with s, m, h or d (e.g. 6h)")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


class Command(BaseCommand):
    summary = "hold a host: none of its tasks is leased for a while (or --lift a hold or a ban early)"
    description = (
        "Tell the scheduler to lease none of a host's tasks for a while: a site's maintenance window, a request\n"
        "to slow down, or a cool-down after bans. Crawls under way finish; the targets stay queued. The host is\n"
        "the host of a source's base_url, as icecrawler status lists it. Kept across scheduler restarts.\n\n"
        "  icecrawler hold weibo.com --for 6h --reason 'site maintenance'\n"
        "  icecrawler hold weibo.com --lift            # lease its tasks again now (also ends a ban's block)\n"
    )
    takes_ice_args = True

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("host", help="e.g. weibo.com, m.weibo.cn, club.jd.com")
        how = parser.add_mutually_exclusive_group(required=True)
        how.add_argument("--for", dest="duration", metavar="DURATION", help="how long: 90, 90s, 30m, 6h or 2d")
        how.add_argument("--lift", action="store_true", help="end a hold (or a ban's block) now")
        parser.add_argument("--reason", default="", help="shown by icecrawler status")

    def run(self, args: argparse.Namespace, settings: Settings, ice_args: list[str]) -> int:
        seconds = 0.0 if args.lift else parse_duration(args.duration)
        if not args.lift and seconds <= 0:
            raise ConfigError("--for must be more than 0 (use --lift to end a hold)")
        from crawler_client.gateways import scheduler_gateway

        with rpc.communicator(ice_args) as comm:
            held = scheduler_gateway(comm, settings).hold_host(args.host, seconds, args.reason)
        if args.lift:
            print(f"{args.host}: lifted (any hold or ban's block on it has ended); its tasks are leased again")
        else:
            print(f"{args.host}: held for {held:.0f} s more")
        return 0

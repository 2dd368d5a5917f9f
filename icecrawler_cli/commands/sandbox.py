"""``icecrawler sandbox``: the local stand-in site of every registered source, and the passport, on one port."""

from __future__ import annotations

import argparse

from icecrawler.settings import Settings
from icecrawler_cli.commands import BaseCommand


class Command(BaseCommand):
    summary = "serve the sandbox sites (stand-ins for every source's site) publishing items on a schedule or a trace"
    description = (
        "Serve every registered source's stand-in site on one port, under the prefix the source declares "
        "(`icecrawler sources` lists them; built in: /pc weibo.com's mbloglist, /web weibo.com's ajax "
        "timeline, /m m.weibo.cn's getIndex, /ecshop goods/comment/category/user.php, /jd productPageComments), "
        "and /passport (visitor sessions), with a scalable clock, misbehaviour switches and the ground truth "
        "under /__sandbox/. See docs/SANDBOX.md."
    )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        from sandbox.cli import add_options

        add_options(parser)

    def run(self, args: argparse.Namespace, settings: Settings, ice_args: list[str]) -> int:
        from sandbox.cli import run

        return run(args, settings)

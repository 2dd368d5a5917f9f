"""``icecrawler sandbox``: the local stand-in sites (Weibo desktop + mobile, ECSHOP, JD) on one port."""

from __future__ import annotations

import argparse

from icecrawler.settings import Settings
from icecrawler_cli.commands import BaseCommand


class Command(BaseCommand):
    summary = "serve the sandbox sites (mock Weibo PC/mobile, ECSHOP, JD) publishing items on a schedule"
    description = (
        "Serve every sandbox site on one port: /pc (weibo.com mbloglist), /m (m.weibo.cn getIndex), "
        "/ecshop (goods/comment/category/user.php) and /jd (productPageComments), with a scalable "
        "clock, misbehaviour switches and the ground truth under /__sandbox/. See docs/SANDBOX.md."
    )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        from sandbox.cli import add_options

        add_options(parser)

    def run(self, args: argparse.Namespace, settings: Settings, ice_args: list[str]) -> int:
        from sandbox.cli import run

        return run(args, settings)

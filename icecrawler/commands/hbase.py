"""``icecrawler hbase``."""

from __future__ import annotations

from icecrawler.commands import NotImplementedYet


class Command(NotImplementedYet):
    summary = "hbase (not implemented yet)"

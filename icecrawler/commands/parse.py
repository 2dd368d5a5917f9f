"""``icecrawler parse``."""

from __future__ import annotations

from icecrawler.commands import NotImplementedYet


class Command(NotImplementedYet):
    summary = "parse (not implemented yet)"

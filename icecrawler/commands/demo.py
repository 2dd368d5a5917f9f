"""``icecrawler demo``."""

from __future__ import annotations

from icecrawler.commands import NotImplementedYet


class Command(NotImplementedYet):
    summary = "demo (not implemented yet)"

"""``icecrawler status``."""

from __future__ import annotations

from icecrawler.commands import NotImplementedYet


class Command(NotImplementedYet):
    summary = "status (not implemented yet)"

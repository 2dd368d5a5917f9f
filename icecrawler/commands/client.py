"""``icecrawler client``."""

from __future__ import annotations

from icecrawler.commands import NotImplementedYet


class Command(NotImplementedYet):
    summary = "client (not implemented yet)"

"""``icecrawler storage``."""

from __future__ import annotations

from icecrawler.commands import NotImplementedYet


class Command(NotImplementedYet):
    summary = "storage (not implemented yet)"

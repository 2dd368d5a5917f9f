"""``icecrawler scheduler``."""

from __future__ import annotations

from icecrawler.commands import NotImplementedYet


class Command(NotImplementedYet):
    summary = "scheduler (not implemented yet)"

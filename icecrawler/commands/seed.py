"""``icecrawler seed``."""

from __future__ import annotations

from icecrawler.commands import NotImplementedYet


class Command(NotImplementedYet):
    summary = "seed (not implemented yet)"

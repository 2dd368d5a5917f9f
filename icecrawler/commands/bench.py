"""``icecrawler bench``."""

from __future__ import annotations

from icecrawler.commands import NotImplementedYet


class Command(NotImplementedYet):
    summary = "bench (not implemented yet)"

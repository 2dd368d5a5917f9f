"""``icecrawler certs``."""

from __future__ import annotations

from icecrawler.commands import NotImplementedYet


class Command(NotImplementedYet):
    summary = "certs (not implemented yet)"

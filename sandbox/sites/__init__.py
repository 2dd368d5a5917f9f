"""One renderer module per fake site (the real paths, parameters and formats of docs/FORMATS.md); they share the
world, the HTTP vocabulary of ``sandbox.web`` and, for the two Weibo front-ends, ``sandbox.sites.weibo``."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

from icecrawler.errors import ConfigError
from icecrawler.sourcespec import registry

__all__ = ["registered_sites"]


def registered_sites(world: Any, served: Iterable[str]) -> list[Any]:
    """Sites of registered sources whose prefix no site in ``served`` has: each found by name, as
    ``SANDBOX_SITE`` in the module that declared the source (a test's throwaway source) or as ``SITE`` in
    ``sandbox.sites.<source name>``; built with the world (``site_class(world)``)."""
    taken = set(served)
    sites: list[Any] = []
    for name, spec in registry.items():
        if not spec.sandbox_site or spec.sandbox_site in taken:
            continue
        site_class = getattr(registry.module(name), "SANDBOX_SITE", None)
        if site_class is None:
            try:
                site_class = getattr(importlib.import_module(f"sandbox.sites.{name}"), "SITE", None)
            except ModuleNotFoundError:
                site_class = None
        if site_class is None or getattr(site_class, "prefix", None) != spec.sandbox_site:
            raise ConfigError(f"source {name}: no sandbox site with prefix {spec.sandbox_site!r} "
                             f"(SANDBOX_SITE in its module or SITE in sandbox.sites.{name})")
        sites.append(site_class(world))
        taken.add(spec.sandbox_site)
    return sites

"""One renderer module per fake site (the real paths, parameters and formats of docs/SITE_RESPONSES.md); they share the
world, the HTTP vocabulary of ``sandbox.web`` and, for the Weibo front-ends, ``sandbox.sites.weibo``.

A source's site is found by the source's name: ``make_site(context)`` in ``sandbox.sites.<source name>``, or
``make_sandbox_site(context)`` in the module that declared the source (a test's throwaway source); the server
serves it under the prefix the source declares (``SourceSpec.sandbox_site``). The passport is no source's site:
the server adds it itself."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from icecrawler.errors import ConfigError
from icecrawler.sourcespec import registry

if TYPE_CHECKING:
    from sandbox.sites.passport import VisitorRegistry
    from sandbox.world import World

__all__ = ["SiteContext", "source_sites"]


@dataclass(frozen=True)
class SiteContext:
    """What a site may be built from: the world, the shop accounts, the passport's visitor sessions."""

    world: World
    accounts: dict[str, str]
    visitors: VisitorRegistry


def _factory(name: str) -> Callable[[SiteContext], Any] | None:
    found = getattr(registry.module(name), "make_sandbox_site", None)
    if found is not None:
        return found  # type: ignore[no-any-return]
    try:
        module = importlib.import_module(f"sandbox.sites.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"sandbox.sites.{name}":
            raise
        return None
    return getattr(module, "make_site", None)


def source_sites(context: SiteContext, served: Iterable[str] = ()) -> list[Any]:
    """The site of every registered source that declares one, except prefixes in ``served``."""
    taken = set(served)
    sites: list[Any] = []
    for name, spec in registry.items():
        if not spec.sandbox_site or spec.sandbox_site in taken:
            continue
        factory = _factory(name)
        site = factory(context) if factory is not None else None
        if site is None or getattr(site, "prefix", None) != spec.sandbox_site:
            raise ConfigError(
                f"source {name}: no sandbox site with prefix {spec.sandbox_site!r} (make_site in "
                f"sandbox.sites.{name}, or make_sandbox_site in the module declaring the source)"
            )
        sites.append(site)
        taken.add(spec.sandbox_site)
    return sites

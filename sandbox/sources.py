"""Which sandbox site serves which crawler source, and the ``sources.*`` settings that point a crawl at a
running sandbox: what the stack, the benchmarks and the tests share. Each source declares its site prefix
(``SourceSpec.sandbox_site``); this module only reads the source registry."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from icecrawler.sourcespec import registry
from sandbox.sites.passport import GENVISITOR_PATH

__all__ = ["SITE_OF_SOURCE", "source_settings", "visitor_sources"]


class _SiteOfSource(Mapping[str, str]):
    """Every source the sandbox serves → the site prefix serving it (``sources.<name>.base_url`` = server +
    prefix), read from the registry each time (a source registered later in the process is included)."""

    @staticmethod
    def _table() -> dict[str, str]:
        return {name: spec.sandbox_site for name, spec in registry.items() if spec.sandbox_site}

    def __getitem__(self, source: str) -> str:
        return self._table()[source]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


SITE_OF_SOURCE: Mapping[str, str] = _SiteOfSource()


def visitor_sources() -> list[str]:
    """Sources whose visitor sessions the sandbox's passport mints (``sources.<name>.visitor_url``): those that log
    in as visitors and whose spec names a default visitor URL (weibo_web; m.weibo.cn's anonymous answers need none)."""
    return [name for name, spec in registry.items() if spec.login == "visitor" and spec.options.get("visitor_url")]


def source_settings(server_url: str) -> dict[str, str]:
    """``sources.<name>.base_url`` (and ``visitor_url``) for a sandbox listening at ``server_url``."""
    base = server_url.rstrip("/")
    settings = {f"sources.{source}.base_url": f"{base}/{site}" for source, site in SITE_OF_SOURCE.items()}
    settings.update(
        {f"sources.{source}.visitor_url": f"{base}/passport{GENVISITOR_PATH}" for source in visitor_sources()}
    )
    return settings

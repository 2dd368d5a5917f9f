"""Which sandbox site serves which crawler source, and the ``sources.*`` settings that point a crawl at a
running sandbox: the one table the stack, the benchmarks and the tests share (a new source is added here)."""

from __future__ import annotations

from sandbox.sites.passport import GENVISITOR_PATH
from sandbox.world import WEIBO_SOURCES

__all__ = ["SITE_OF_SOURCE", "source_settings"]

#: Every source the sandbox serves → the site prefix serving it (``sources.<name>.base_url`` = server + prefix).
SITE_OF_SOURCE: dict[str, str] = {
    **{source: site for site, source in WEIBO_SOURCES.items()},
    "ecshop": "ecshop",
    "jd": "jd",
}
#: Sources whose visitor sessions the sandbox's passport mints (``sources.<name>.visitor_url``).
VISITOR_SOURCES = ("weibo_web",)


def source_settings(server_url: str) -> dict[str, str]:
    """``sources.<name>.base_url`` (and ``visitor_url``) for a sandbox listening at ``server_url``."""
    base = server_url.rstrip("/")
    settings = {f"sources.{source}.base_url": f"{base}/{site}" for source, site in SITE_OF_SOURCE.items()}
    settings.update(
        {f"sources.{source}.visitor_url": f"{base}/passport{GENVISITOR_PATH}" for source in VISITOR_SOURCES}
    )
    return settings

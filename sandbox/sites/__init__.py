"""One renderer module per fake site (the real paths, parameters and formats of docs/SOURCES.md); they share the
world, the HTTP vocabulary of ``sandbox.web`` and, for the two Weibo front-ends, ``sandbox.sites.weibo``."""

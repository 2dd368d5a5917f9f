"""icecrawler: shared plumbing (settings, logging, errors, core types, Ice) and the ``icecrawler`` CLI.

The roles live in their own top-level packages: ``scheduler_server``, ``storage_server``, ``crawler_client``,
``shhd`` and ``sandbox``.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"

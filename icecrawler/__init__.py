"""icecrawler: shared plumbing (settings, logging, errors, core types, Ice) and the ``icecrawler`` CLI.

The roles live in their own top-level packages: ``scheduler_server``, ``storage_server``, ``crawler_client``, and
``shhd`` (revisit policies and fingerprints). The stand-in sites (``sandbox``) and the benchmarks (``bench``) exist
only in a source checkout (``icecrawler.optional``).
"""

__all__ = ["__version__"]

#: The one place the version is written: setuptools reads it (pyproject.toml), ``icecrawler --version`` prints it.
__version__ = "0.1.0"

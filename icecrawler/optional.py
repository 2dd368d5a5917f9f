"""What an install may lack, and the one clear error for it.

The wheel ships the product (``icecrawler``, the CLI ``icecrawler_cli``, the three roles, ``shhd``); the stand-in
sites (``sandbox``), the benchmarks (``bench``) and the local launcher, demo and HBase runner (``icecrawler_local``)
live only in a source checkout, so that an install puts no package with such a generic name
into site-packages. A few packages are only needed by the demo and the benchmarks and come with an extra
(``pip install 'icecrawler[demo]'`` / ``[bench]``). Both cases end in ``MissingPartError`` naming what to do.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from icecrawler.errors import MissingPartError

__all__ = ["CHECKOUT_PACKAGES", "EXTRA_OF", "explain_missing", "source_checkout", "use_source_checkout"]

#: Top-level packages that exist only in a source checkout.
CHECKOUT_PACKAGES = ("sandbox", "bench", "icecrawler_local")

#: Third-party packages that only an extra installs, and which extra (``bench`` installs both of them: the revisit
#: benchmark draws its plots with matplotlib).
EXTRA_OF = {"matplotlib": "demo", "simhash": "bench"}


def source_checkout() -> Path | None:
    """The root of the source checkout this ``icecrawler`` was imported from, or None for an installed wheel."""
    root = Path(__file__).resolve().parent.parent
    return root if all((root / name / "__init__.py").is_file() for name in CHECKOUT_PACKAGES) else None


def use_source_checkout() -> Path | None:
    """Make ``sandbox``, ``bench`` and ``icecrawler_local`` importable here and in child processes when running
    from a checkout.

    An editable install maps only the packages the wheel ships, so the checkout root goes on ``sys.path`` and on
    ``PYTHONPATH`` (the demo and the benchmarks start ``icecrawler sandbox`` / ``-m bench.*`` children)."""
    root = source_checkout()
    if root is None:
        return None
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(root) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(root), *paths])
    return root


def explain_missing(exc: ModuleNotFoundError, command: str) -> MissingPartError | None:
    """The clear error for a missing checkout package or extra, or None when ``exc`` is about something else."""
    top = (exc.name or "").partition(".")[0]
    if top in CHECKOUT_PACKAGES:
        return MissingPartError(
            f"'{command}' needs a source checkout: the '{top}' package is not part of the installed wheel. "
            f"Clone the repository and run it from there (pip install -e '.[dev,bench,demo]')."
        )
    if top in EXTRA_OF:
        extra = "bench" if command == "bench" else EXTRA_OF[top]
        return MissingPartError(
            f"'{command}' needs the '{top}' package, which the '{extra}' extra installs: "
            f"pip install 'icecrawler[{extra}]'"
        )
    return None

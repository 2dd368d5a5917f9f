"""Keep the lines of ``pip freeze`` (stdin) that the project's install needs: icecrawler with its dev, bench and
demo extras, and the build tools bootstrap.sh upgrades, followed through their own requirements. Whatever else
sits in .venv (a tool installed by hand) is left out of scripts/constraints.txt."""

from __future__ import annotations

import sys
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOTS = [("icecrawler", frozenset({"dev", "bench", "demo"})), ("setuptools", frozenset()), ("wheel", frozenset())]


def needed() -> set[str]:
    """Canonical names of the distributions the roots require, transitively, on this interpreter."""
    seen: set[str] = set()
    todo = [(name, extras) for name, extras in ROOTS]
    while todo:
        name, extras = todo.pop()
        key = canonicalize_name(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        first_visit = key not in seen
        seen.add(key)
        for line in dist.requires or []:
            req = Requirement(line)
            wanted = req.marker is None or any(req.marker.evaluate({"extra": e}) for e in (extras or {""}))
            if wanted and (first_visit or req.marker is not None):
                todo.append((req.name, frozenset(req.extras)))
    return seen


def main() -> None:
    keep = needed()
    for line in sys.stdin:
        name = line.split("==", 1)[0].split(" @ ", 1)[0].strip()
        if name and canonicalize_name(name) in keep:
            sys.stdout.write(line)


if __name__ == "__main__":
    main()

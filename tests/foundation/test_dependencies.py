"""Every third-party package the code imports is declared in pyproject.toml, where its users need it: what the
product packages import when they load, in the core dependencies (an import inside a function, such as the demo's
plot, may come from an extra); the checkout-only packages (sandbox, bench, icecrawler_local) in the core or the
bench/demo extras; the tests in any of those or the dev extra."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OURS = {
    "icecrawler",
    "icecrawler_cli",
    "icecrawler_local",
    "scheduler_server",
    "storage_server",
    "crawler_client",
    "shhd",
    "sandbox",
    "bench",
    "tests",
    "Crawler",
    "CrawlerBench",
}  # the last two: generated from Slice at run time
PRODUCT = ("icecrawler", "icecrawler_cli", "scheduler_server", "storage_server", "crawler_client", "shhd")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(requirements: list[str]) -> set[str]:
    return {normalise(re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0]) for requirement in requirements}


def imported_top_levels(paths: list[Path], *, at_load_only: bool = False) -> set[str]:
    """Top-level names of the third-party modules ``paths`` import (``at_load_only``: outside functions)."""
    names: set[str] = set()
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        nodes = (
            [
                node
                for statement in tree.body
                if not isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                for node in ast.walk(statement)
            ]
            if at_load_only
            else list(ast.walk(tree))
        )
        for node in nodes:
            if isinstance(node, ast.Import):
                names.update(alias.name.partition(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.partition(".")[0])
    return names - OURS - set(sys.stdlib_module_names) - {"__future__"}


def undeclared(folders: tuple[str, ...], declared: set[str], *, at_load_only: bool = False) -> dict[str, list[str]]:
    tracked = subprocess.run(
        ["git", "ls-files", "--", *(f"{folder}/*.py" for folder in folders)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    distributions = importlib.metadata.packages_distributions()
    missing = {}
    for module in sorted(imported_top_levels([REPO / name for name in tracked], at_load_only=at_load_only)):
        providers = {normalise(dist) for dist in distributions.get(module, [])}
        if not providers & declared:
            missing[module] = sorted(providers)
    return missing


def test_every_import_is_declared_where_it_is_needed() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = requirement_names(project["dependencies"])
    extras = {name: requirement_names(requirements) for name, requirements in project["optional-dependencies"].items()}
    assert undeclared(PRODUCT, core, at_load_only=True) == {}
    assert undeclared(PRODUCT, core | extras["bench"] | extras["demo"]) == {}
    assert undeclared(("sandbox", "bench", "icecrawler_local"), core | extras["bench"] | extras["demo"]) == {}
    assert undeclared(("tests",), core | extras["bench"] | extras["demo"] | extras["dev"]) == {}
    assert "simhash" not in core and "matplotlib" not in core, "bench/demo-only packages belong in extras"

"""Every third-party package the code imports is declared in pyproject.toml, where its users need it: what the
product packages import when they load, in the core dependencies (an import inside a function, such as the demo's
plot, may come from an extra); the checkout-only packages (sandbox, bench, icecrawler_local) in the core or the
bench/demo extras; the tests in any of those or the dev extra."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

from packaging.requirements import Requirement

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


# --- scripts/constraints.txt: the pinned development set -------------------------------------------------------

CONSTRAINTS = REPO / "scripts" / "constraints.txt"


def pins() -> dict[str, str]:
    """Name -> pinned version, from scripts/constraints.txt."""
    found: dict[str, str] = {}
    for line in CONSTRAINTS.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and version.strip(), f"not an exact pin: {line!r}"
            found[normalise(name)] = version.strip()
    return found


def required_only() -> ModuleType:
    spec = importlib.util.spec_from_file_location("required_only", REPO / "scripts" / "required_only.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_declared_requirement_is_pinned_inside_its_range() -> None:
    """A dependency added to pyproject.toml without `make constraints` would be installed unpinned, and a range
    that excludes its pin would make bootstrap fail on a clean machine: both show here first."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = [Requirement(line) for line in project["dependencies"]]
    declared += [Requirement(line) for extra in project["optional-dependencies"].values() for line in extra]
    pinned = pins()
    for requirement in declared:
        name = normalise(requirement.name)
        if name == "zeroc-ice":
            ice = re.search(r"^ICE_VERSION=(\S+)$", (REPO / "scripts" / "bootstrap.sh").read_text(), re.M)
            assert ice and requirement.specifier.contains(ice[1]), "bootstrap.sh builds an Ice the range refuses"
            assert name not in pinned, "Ice's version is bootstrap.sh's ICE_VERSION, not a pin"
            continue
        assert name in pinned, f"{requirement.name} is declared but not pinned: run `make constraints`"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"{requirement.name}=={pinned[name]} is outside {requirement}"
        )


def test_the_virtualenv_holds_exactly_the_pinned_set() -> None:
    """bootstrap.sh installs with the pins, and `make constraints` writes what the venv holds, so the two agree:
    every package the project's install pulls in is pinned at the installed version, and nothing else is pinned."""
    needed = {name for name in required_only().needed() if name not in {"icecrawler", "zeroc-ice", "pip"}}
    pinned = pins()
    assert set(pinned) == needed, (
        f"pinned, not needed: {sorted(set(pinned) - needed)}; needed, not pinned: {sorted(needed - set(pinned))}"
    )
    installed = {name: importlib.metadata.version(name) for name in needed}
    drift = {name: (pinned[name], installed[name]) for name in needed if pinned[name] != installed[name]}
    assert drift == {}, f"(pinned, installed) differ: run `make setup`, or `make constraints` to move the pins: {drift}"


def test_a_failed_copy_of_the_built_ice_wheel_never_reaches_the_cache(tmp_path: Path) -> None:
    """The wheel goes to the cache through a .partial so that a cut copy is never taken for a built wheel: a copy
    that fails (a full disk) must stop bootstrap, not be renamed into place. The loop is bootstrap.sh's own text,
    run under its ``set -euo pipefail`` with a ``cp`` that writes half the file and fails."""
    loop = re.search(
        r"^ +for wheel in \"\$src\"/wheel/.*?^ +done$", (REPO / "scripts" / "bootstrap.sh").read_text(), re.M | re.S
    )
    assert loop, "bootstrap.sh no longer copies the wheel in a `for wheel in` loop: update this test"
    (tmp_path / "src" / "wheel").mkdir(parents=True)
    (tmp_path / "src" / "wheel" / "zeroc_ice-3.8.3-cp312-linux_x86_64.whl").write_bytes(b"PK" * 1000)
    cache = tmp_path / "cache"
    cache.mkdir()
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "cp").write_text(
        '#!/bin/sh\nhead -c 1000 "$1" >"$2"\necho "cp: error writing: No space left" >&2\nexit 1\n'
    )
    (shims / "cp").chmod(0o755)
    done = subprocess.run(
        ["bash", "-c", f"set -euo pipefail\nsrc={tmp_path / 'src'}\nICE_WHEELS={cache}\n{loop[0]}\n"],
        env={"PATH": f"{shims}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode != 0, done.stderr
    assert not list(cache.glob("*.whl")), "a truncated wheel was published to the cache"

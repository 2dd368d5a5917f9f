"""The import-linter layers contract (``[tool.importlinter]`` in pyproject.toml) holds, and it is not toothless:
on a copy of the tree where the ground floor imports a role, ``lint-imports`` fails and names that import."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def root_packages() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    return list(config["root_packages"])


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def copy_packages(target: Path) -> Path:
    """The root packages' Python files and pyproject.toml, as git sees them (tracked plus new, not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "pyproject.toml"]
        + [f"{name}/*.py" for name in root_packages()],
        cwd=REPO,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if (REPO / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, target / name)
    return target


def test_the_layers_contract_holds() -> None:
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "1 kept, 0 broken" in result.stdout


def test_an_upward_import_from_the_ground_floor_or_a_role_breaks_it(tmp_path: Path) -> None:
    """The ground floor importing a role, and the client (a product package) importing the sandbox's page
    renderers, both break the contract: page formats are rendered only in ``sandbox/sites``, outside the wheel."""
    root = copy_packages(tmp_path)
    errors = root / "icecrawler" / "errors.py"
    errors.write_text(errors.read_text() + "\n\ndef _upward() -> None:\n    import scheduler_server.server  # noqa\n")
    parser = root / "crawler_client" / "sources" / "weibo_pc.py"
    parser.write_text(parser.read_text() + "\n\ndef _renderer() -> None:\n    import sandbox.sites.weibo_pc  # noqa\n")
    result = lint_imports(root)
    assert result.returncode != 0, result.stdout[-3000:]
    assert "icecrawler is not allowed to import scheduler_server" in result.stdout, result.stdout[-3000:]
    assert "icecrawler.errors -> scheduler_server.server" in result.stdout, result.stdout[-3000:]
    assert "crawler_client is not allowed to import sandbox" in result.stdout, result.stdout[-3000:]
    assert "crawler_client.sources.weibo_pc -> sandbox.sites.weibo_pc" in result.stdout, result.stdout[-3000:]

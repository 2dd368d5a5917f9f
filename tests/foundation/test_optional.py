"""What an install may lack (an extra, a source-checkout-only package) ends in one clear error naming the fix;
the version is written once."""

from __future__ import annotations

import importlib
import re
import subprocess
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

import icecrawler
from crawler_client.headers import FALLBACK_USER_AGENT
from icecrawler.errors import MissingPartError
from icecrawler.optional import explain_missing, source_checkout
from icecrawler_cli import cli

REPO = Path(__file__).resolve().parents[2]


def test_a_missing_checkout_package_says_a_source_checkout_is_needed() -> None:
    error = explain_missing(ModuleNotFoundError("No module named 'sandbox'", name="sandbox.cli"), "sandbox")
    assert isinstance(error, MissingPartError) and isinstance(error, ImportError)
    assert "'sandbox' needs a source checkout" in str(error) and "not part of the installed wheel" in str(error)


@pytest.mark.parametrize(
    ("module", "command", "extra"),
    [
        ("matplotlib", "demo", "demo"),
        ("matplotlib.pyplot", "demo", "demo"),
        ("matplotlib", "bench", "bench"),  # the revisit benchmark plots: the bench extra has matplotlib too
        ("simhash", "bench", "bench"),
    ],
)
def test_a_missing_extra_is_named(module: str, command: str, extra: str) -> None:
    error = explain_missing(ModuleNotFoundError(f"No module named {module!r}", name=module), command)
    assert error is not None and f"pip install 'icecrawler[{extra}]'" in str(error)


def test_any_other_missing_module_is_not_explained_away() -> None:
    assert explain_missing(ModuleNotFoundError("No module named 'Ice'", name="Ice"), "scheduler") is None
    assert explain_missing(ModuleNotFoundError("no name"), "scheduler") is None


def test_a_command_that_cannot_be_imported_is_listed_and_says_why(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.import_module

    def without_sandbox(name: str, package: str | None = None) -> ModuleType:
        if name == "icecrawler_cli.commands.demo":
            raise ModuleNotFoundError("No module named 'sandbox'", name="sandbox")
        return real(name, package)

    monkeypatch.setattr(cli.importlib, "import_module", without_sandbox)
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert re.search(r"demo\s+not available in this install", capsys.readouterr().out)
    assert cli.main(["demo", "--duration", "5"]) == 2
    assert "icecrawler demo: error: 'demo' needs a source checkout" in capsys.readouterr().err


def test_a_missing_extra_while_a_command_runs_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from icecrawler_cli.commands import settings as settings_command

    def run(*args: object) -> int:
        raise ModuleNotFoundError("No module named 'simhash'", name="simhash")

    monkeypatch.setattr(settings_command.Command, "run", run)
    assert cli.main(["settings"]) == 2
    assert "pip install 'icecrawler[bench]'" in capsys.readouterr().err


def test_the_version_is_written_once_and_printed(capsys: pytest.CaptureFixture[str]) -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "icecrawler.__version__"}
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"icecrawler {icecrawler.__version__}\n"
    # The user agent of sources that name none of their own carries the same version.
    assert FALLBACK_USER_AGENT.startswith(f"icecrawler/{icecrawler.__version__} ")
    tracked = subprocess.run(
        ["git", "ls-files", "*.py", "*.toml", "*.cfg", "*.sh", "*.in"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    written = [name for name in tracked if f'"{icecrawler.__version__}"' in (REPO / name).read_text(errors="replace")]
    assert written == ["icecrawler/__init__.py"]


def test_this_checkout_is_recognised() -> None:
    assert source_checkout() == REPO

"""The wheel and the sdist build with ``python -m build``, and the wheel installs into a fresh virtualenv.

The build runs on a copy of the checkout's files (tracked, plus new files git does not ignore), so the checkout
gains no build output. It uses this environment's setuptools (``--no-isolation``): an isolated build would
download its build requirements, and tests talk to loopback only. The fresh venv gets the wheel alone
(``--no-deps``), so nothing is compiled; for the checks that import our packages, it is then pointed at the
dependencies already installed here (a ``.pth`` file: a path, no code of ours)."""

from __future__ import annotations

import email.parser
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

import icecrawler

pytestmark = [pytest.mark.build, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
VERSION = icecrawler.__version__
#: What the wheel installs into site-packages: the product, no test- or bench-only packages.
PRODUCT = {"icecrawler", "icecrawler_cli", "scheduler_server", "storage_server", "crawler_client", "shhd"}


def copy_checkout(target: Path) -> Path:
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            check=True,
            timeout=60,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def clean_env() -> dict[str, str]:
    """No PYTHONPATH: the fresh venv must import our packages from the wheel, not from a checkout."""
    return {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("packaging")
    source = copy_checkout(root / "src")
    out = root / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return out


def only(folder: Path, pattern: str) -> Path:
    (found,) = folder.glob(pattern)
    return found


def test_the_wheel_holds_the_product_and_the_contract_only(dist: Path) -> None:
    wheel = only(dist, f"icecrawler-{VERSION}-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = email.parser.Parser().parsestr(archive.read(f"icecrawler-{VERSION}.dist-info/METADATA").decode())
    top = {name.split("/", 1)[0] for name in names}
    assert top == PRODUCT | {f"icecrawler-{VERSION}.dist-info"}, top
    assert "icecrawler/slice/crawler.ice" in names
    assert not [name for name in names if name.endswith(".ice") and name != "icecrawler/slice/crawler.ice"]

    assert metadata["Version"] == VERSION
    requires = metadata.get_all("Requires-Dist") or []
    core = {req.split(">")[0].split("<")[0].split("=")[0].strip() for req in requires if "extra ==" not in req}
    assert {
        "zeroc-ice",
        "berkeleydb",
        "happybase",
        "thriftpy2",
        "requests",
        "urllib3",
        "beautifulsoup4",
        "lxml",
        "jieba",
        "numpy",
        "cryptography",
    } <= core
    assert not core & {"simhash", "matplotlib"}, "bench/demo-only packages must be extras"
    assert any(req.startswith("simhash") and 'extra == "bench"' in req for req in requires)
    assert any(req.startswith("matplotlib") and 'extra == "demo"' in req for req in requires)


def test_the_sdist_carries_what_the_wheel_is_built_from(dist: Path) -> None:
    sdist = only(dist, f"icecrawler-{VERSION}.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"pyproject.toml", "setup.py", "slice/crawler.ice", "README.md", "icecrawler_cli/cli.py"} <= names
    assert not any(name.startswith(("sandbox/", "bench/", "icecrawler_local/", "tests/")) for name in names)


def test_the_wheel_installs_into_a_fresh_venv_and_runs(dist: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            "--quiet",
            str(only(dist, "*.whl")),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
        env=clean_env(),
    )
    assert installed.returncode == 0, installed.stderr
    env, run_in = clean_env(), tmp_path  # not the checkout: its folders must not be importable by accident

    version = subprocess.run(
        [venv / "bin" / "icecrawler", "--version"],
        capture_output=True,
        text=True,
        cwd=run_in,
        env=env,
        timeout=120,
        check=False,
    )
    assert (version.returncode, version.stdout) == (0, f"icecrawler {VERSION}\n"), version.stderr

    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
            env=env,
            timeout=60,
        ).stdout.strip()
    )
    installed_names = {path.name for path in site.iterdir()}
    assert installed_names >= PRODUCT
    assert not installed_names & {"sandbox", "bench", "icecrawler_local", "tests"}

    # The dependencies installed here, by path (no editable finder of ours runs from a path line).
    (site / "deps.pth").write_text(
        "\n".join(sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})) + "\n"
    )
    probe = (
        "import icecrawler, sys; from icecrawler import rpc; assert rpc.crawler().SchedulerPrx; "
        "assert icecrawler.__file__.startswith(sys.prefix), icecrawler.__file__; print(rpc.SLICE_FILE)"
    )
    loaded = subprocess.run(
        [python, "-c", probe], capture_output=True, text=True, cwd=run_in, env=env, timeout=120, check=False
    )
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == str(site / "icecrawler" / "slice" / "crawler.ice")

    for command in ("sandbox", "demo", "bench", "hbase"):
        refused = subprocess.run(
            [venv / "bin" / "icecrawler", command],
            capture_output=True,
            text=True,
            cwd=run_in,
            env=env,
            timeout=120,
            check=False,
        )
        assert refused.returncode == 2, (command, refused.stdout, refused.stderr)
        assert f"'{command}' needs a source checkout" in refused.stderr, refused.stderr

"""``icecrawler certs`` when its files are not what it wrote: a damaged or foreign CA file, a key that is not the
certificate's, and a run killed midway (each file is whole or absent, a secret is never readable by others). Every
case is one clear line, never a traceback from the crypto library. Real keys and certificates, no Ice."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from icecrawler import tls
from icecrawler.errors import ConfigError
from tests.helpers import killed_midway

REPO = Path(__file__).resolve().parents[2]

# Runs `certs <argv[3:]>` in-process and SIGKILLs itself as the write of the file named argv[2] is about to be renamed
# into place (its `.partial` is complete and fsynced).
KILLED_AT_RENAME = """
import os, signal, sys
sys.path.insert(0, sys.argv[1])
from icecrawler_cli.cli import main
replace = os.replace
def replace_or_die(source, target):
    if os.path.basename(str(target)) == sys.argv[2]:
        os.kill(os.getpid(), signal.SIGKILL)
    return replace(source, target)
os.replace = replace_or_die
main(["certs", *sys.argv[3:]])
"""


def _certs(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "icecrawler_cli", "certs", *argv], capture_output=True, text=True, timeout=60, cwd=REPO
    )


def _refused_in_one_line(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


def test_a_key_of_another_ca_is_named_as_not_the_certificates_key(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    tls.init_ca(ours)
    tls.init_ca(theirs)
    shutil.copy(theirs / tls.CA_KEY, ours / tls.CA_KEY)
    with pytest.raises(ConfigError, match=r"ca-key\.pem is not the key of .*ca\.pem.*certs init --dir .* --force"):
        tls.issue(ours, "node-1")
    assert not (ours / "node-1.pem").exists() and not (ours / "node-1-key.pem").exists()


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        (tls.CA_CERT, b"garbage\n", "ca.pem is not a PEM certificate"),
        (tls.CA_KEY, None, "ca-key.pem is not a PEM key"),  # cut after 100 bytes
        (tls.CA_KEY, b"", "ca-key.pem is not a PEM key"),
    ],
)
def test_a_damaged_ca_file_is_a_one_line_error(tmp_path: Path, name: str, content: bytes | None, says: str) -> None:
    tls.init_ca(tmp_path)
    damaged = tmp_path / name
    damaged.write_bytes(damaged.read_bytes()[:100] if content is None else content)
    _refused_in_one_line(_certs("issue", "node-1", "--dir", str(tmp_path)), says)
    assert not (tmp_path / "node-1.pem").exists()


def test_init_killed_between_the_key_and_the_certificate_is_named_and_init_again_mends_it(tmp_path: Path) -> None:
    killed_midway(KILLED_AT_RENAME, str(REPO), tls.CA_CERT, "init", "--dir", str(tmp_path))
    assert (tmp_path / tls.CA_KEY).stat().st_mode & 0o777 == 0o600  # the key is whole and private
    assert not (tmp_path / tls.CA_CERT).exists() and (tmp_path / f"{tls.CA_CERT}.partial").exists()
    _refused_in_one_line(_certs("init", "--dir", str(tmp_path)), "holds ca-key.pem but no ca.pem", "--force")
    _refused_in_one_line(_certs("issue", "node-1", "--dir", str(tmp_path)), "holds ca-key.pem but no ca.pem", "--force")
    assert _certs("init", "--dir", str(tmp_path), "--force").returncode == 0
    assert _certs("issue", "node-1", "--dir", str(tmp_path)).returncode == 0
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        [tls.CA_CERT, tls.CA_KEY, "node-1.pem", "node-1-key.pem", "node-1-ssl.conf"]
    )  # no .partial left


def test_init_force_killed_midway_leaves_a_pair_that_is_refused_not_one_that_signs_useless_certificates(
    tmp_path: Path,
) -> None:
    tls.init_ca(tmp_path)
    killed_midway(KILLED_AT_RENAME, str(REPO), tls.CA_CERT, "init", "--dir", str(tmp_path), "--force")
    # The new key is in place beside the old certificate: a node signed by it would fail every TLS handshake.
    _refused_in_one_line(_certs("issue", "node-1", "--dir", str(tmp_path)), "is not the key of")
    assert not (tmp_path / "node-1.pem").exists()


def test_issue_killed_before_its_key_is_in_place_leaves_no_key_and_a_private_partial(tmp_path: Path) -> None:
    tls.init_ca(tmp_path)
    tls.issue(tmp_path, "node-1")
    before = {name: (tmp_path / name).read_bytes() for name in ("node-1.pem", "node-1-key.pem")}
    killed_midway(KILLED_AT_RENAME, str(REPO), "node-1-key.pem", "issue", "node-1", "--dir", str(tmp_path), "--force")
    assert {name: (tmp_path / name).read_bytes() for name in before} == before  # the old pair, whole and matching
    partial = tmp_path / "node-1-key.pem.partial"
    assert partial.stat().st_mode & 0o777 == 0o600 and b"END PRIVATE KEY" in partial.read_bytes()
    partial.chmod(0o644)  # as if left by something else: the next write must not keep that mode
    tls.issue(tmp_path, "node-1", force=True)
    assert (tmp_path / "node-1-key.pem").stat().st_mode & 0o777 == 0o600
    assert not partial.exists() and (tmp_path / "node-1-key.pem").read_bytes() != before["node-1-key.pem"]

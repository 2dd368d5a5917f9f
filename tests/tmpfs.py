"""A small tmpfs for full-disk tests: mounted for one test, filled to the last byte on demand, then unmounted.

Mounting needs root (CI runs as root, see .ci/run); elsewhere the test is skipped with the reason, and under CI
the same condition fails instead (``tests.requirements``)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.requirements import skip_or_fail

__all__ = ["fill", "fill_inodes", "fill_to", "small_tmpfs"]


@contextmanager
def small_tmpfs(path: Path, size_mb: int, inodes: int = 0) -> Iterator[Path]:
    """A fresh tmpfs of ``size_mb`` MiB at ``path`` for the duration of the block; with ``inodes``, that many files
    and folders at most (a tmpfs full of data still makes empty files and folders: ``fill_inodes`` stops those)."""
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size_mb}m" + (f",nr_inodes={inodes}" if inodes else "")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        skip_or_fail(f"full-disk test: cannot mount a tmpfs at {path} (needs root): {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def fill(directory: Path) -> Path:
    """Write a file in ``directory`` until the file system is full; returns it (delete it to free the space)."""
    filler = directory / "filler"
    chunk = b"\0" * (1 << 16)
    with filler.open("wb", buffering=0) as out:
        try:
            while True:
                out.write(chunk)
        except OSError:
            pass
        try:  # the last few bytes
            while True:
                out.write(b"\0" * 512)
        except OSError:
            pass
    return filler


def fill_inodes(directory: Path, leave: int = 0, most: int = 10_000) -> Path:
    """Make empty files in a folder in ``directory`` until its file system has no inode left (a ``small_tmpfs``
    with ``inodes``; at most ``most``), then remove ``leave`` of them; returns the folder (remove it to make room)."""
    fillers = directory / "inode-fillers"
    fillers.mkdir()
    for n in range(most):
        try:
            (fillers / str(n)).touch()
        except OSError:
            for left in range(min(leave, n)):
                (fillers / str(left)).unlink()
            return fillers
    raise AssertionError(f"{directory} still makes files after {most}: mount it with fewer inodes")


def fill_to(directory: Path, free_bytes: int) -> Path:
    """Write a file in ``directory`` until about ``free_bytes`` are left on its file system; returns it (delete it
    to free the space)."""
    filler = directory / "filler"
    left = shutil.disk_usage(directory).free - free_bytes
    chunk = b"\0" * (1 << 16)
    with filler.open("wb") as out:
        while left > 0:
            left -= out.write(chunk[: min(left, len(chunk))])
    return filler

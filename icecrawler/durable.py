"""Folders that are published only once they are on disk.

Several commands build a folder under a temporary name and rename it into place when it is complete (a backup, a
reshard's new shard databases). A rename alone says nothing about a power cut: the kernel may have written the
rename but not the files' pages, or the files but not the rename. So the folder's files and folders are fsynced
before the rename, and the parent folder after it; only then is the new name, and all that is under it, durable.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["publish", "sync_dir", "sync_tree"]


def sync_dir(path: Path) -> None:
    """fsync a folder: what was created, removed or renamed in it is on disk."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_tree(root: Path) -> None:
    """fsync every file and folder under ``root``, and ``root`` itself."""
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            continue
        if path.is_file():
            with path.open("rb") as file:
                os.fsync(file.fileno())
        elif path.is_dir():
            sync_dir(path)
    sync_dir(root)


def publish(renames: list[tuple[Path, Path]]) -> None:
    """Rename each ``(partial, final)`` folder, whose tree is already synced, and then sync the folders that hold
    the new names. ``final`` must not exist, or be an empty folder (it is removed first)."""
    for partial, final in renames:
        if final.is_dir() and not final.is_symlink():
            final.rmdir()  # empty, or this raises: nothing is ever replaced but an empty folder
        partial.rename(final)
    for parent in sorted({final.parent for _, final in renames} | {partial.parent for partial, _ in renames}):
        sync_dir(parent)

"""What must be on disk before it counts: folders published by a rename, files that are only ever whole, and the
journal of a job of several steps.

Several commands build a folder under a temporary name and rename it into place when it is complete (a backup, a
reshard's new shard databases). A rename alone says nothing about a power cut: the kernel may have written the
rename but not the files' pages, or the files but not the rename. So the folder's files and folders are fsynced
before the rename, and the parent folder after it; only then is the new name, and all that is under it, durable.

A job of several steps that must not be left half done by a crash (``--recover`` moving a damaged database aside and
copying what it can into a new one) keeps a journal: a small JSON file saying how far it got, replaced atomically
and on disk before each step, removed when the job is done. The next start finds it and finishes the job.

A file that another program reads (an export, Prometheus's target lists, a TLS key and certificate, the demo's and the
benchmarks' results and figures) is written beside its name and renamed over it when complete (``replaced_whole``,
``write_whole``, ``write_whole_with``), so a reader never sees part of one, and a run killed while it writes one
leaves the last run's file as it was.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from icecrawler.datalock import try_lock
from icecrawler.errors import ServiceError

#: Below this many free bytes, a data file that cannot be opened or checked is taken to be on a full disk, whatever
#: the library calls the failure (SQLite says "disk I/O error" when it cannot size its shared-memory file).
NEARLY_FULL_BYTES = 1 << 20
#: How the libraries word a full disk (Berkeley DB passes on strerror(ENOSPC); SQLite has its own SQLITE_FULL text).
_FULL_WORDS = ("No space left on device", "database or disk is full")

__all__ = [
    "WriteInProgress",
    "aside_path",
    "full_disk",
    "full_disk_note",
    "full_disk_refusal",
    "journal_files",
    "names_full_disk",
    "publish",
    "read_journal",
    "remove_journal",
    "replaced_whole",
    "salvage_aside",
    "stopped_salvage",
    "sync_dir",
    "sync_tree",
    "write_journal",
    "write_whole",
    "write_whole_with",
]


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


def write_whole(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``data``, on disk before this returns: a run killed midway leaves the old file (or none)
    and a ``<path>.partial``. ``mode`` (0o600 for a secret) is set before the first byte is written; without it the
    file gets the usual mode (0o666 less the umask)."""
    with _through_partial(path, path.with_name(path.name + ".partial"), mode) as file:
        file.write(data)


def write_whole_with(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """``write_whole`` for a writer that wants a binary file rather than bytes (a figure's ``savefig``): ``path`` is
    replaced by what ``write(file)`` wrote, whole, or left as it was if ``write`` raises or the run is killed."""
    with _through_partial(path, path.with_name(path.name + ".partial"), None) as file:
        write(file)


@contextmanager
def _through_partial(path: Path, partial: Path, mode: int | None) -> Iterator[BinaryIO]:
    """``partial`` opened for writing; when the block ends it is fsynced and renamed over ``path`` (and the folder
    fsynced), and when the block raises it is removed: the one mechanism of every whole-file write here. The copy is
    locked while it is written, so that a second run writing ``path`` at the same time is refused (``ServiceError``)
    instead of truncating the first one's copy, which the first would then go on writing into after the rename."""
    fd = _open_locked(partial, path, 0o666 if mode is None else mode)
    with os.fdopen(fd, "wb") as file:
        try:
            if mode is not None:
                os.fchmod(file.fileno(), mode)  # a .partial left by an earlier run kept the mode it was made with
            yield file
            file.flush()
            os.fsync(file.fileno())
        except BaseException:
            partial.unlink(missing_ok=True)  # while locked: never another run's copy
            raise
        os.replace(partial, path)  # while locked: a run that opened the copy just before finds it renamed
    sync_dir(path.parent)


class WriteInProgress(ServiceError):
    """Another run is writing the same file now: this write is refused, and may be tried again once that one is done
    (not: the write cannot be made at all, which trying again does not mend)."""


def _open_locked(partial: Path, path: Path, mode: int) -> int:
    """``partial`` opened, emptied and locked (``flock``: the kernel drops it when the process ends, however, so a
    copy left by a killed run is simply taken over). Held by a run still writing: WriteInProgress. Renamed into place
    by the run that held it between our open and our lock: opened again (a few times at most); still held or renamed
    each time: WriteInProgress. Any other failure
    (a file system that does not lock, say) closes the file and removes the copy, which no other run can be writing
    then: an empty ``FILE.partial`` left behind would only puzzle the operator."""
    for _ in range(5):
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, mode)
        try:
            taken = try_lock(fd, partial)
            if taken and _still_named(fd, partial):
                os.ftruncate(fd, 0)
                return fd
        except BaseException:
            os.close(fd)
            partial.unlink(missing_ok=True)
            raise
        os.close(fd)
        if not taken:
            raise WriteInProgress(
                f"{path} is being written by another run (its {partial.name} is locked): let that one finish, or "
                "write elsewhere"
            )
    raise WriteInProgress(
        f"{path} is being written by other runs, one after another: let them finish, or write elsewhere"
    )


def _still_named(fd: int, partial: Path) -> bool:
    """Whether the file open on ``fd`` is still the one named ``partial`` (not renamed into place meanwhile)."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(partial))
    except FileNotFoundError:
        return False


def write_journal(path: Path, state: dict[str, Any]) -> None:
    """Replace the journal at ``path`` with ``state``, on disk before this returns (never half written)."""
    with _through_partial(path, _journal_partial(path), None) as file:
        file.write(json.dumps(state).encode())


def read_journal(path: Path) -> dict[str, Any] | None:
    """The journal's state, or None when there is none (the job finished, or never started). One that cannot be
    read is an error: it is only ever replaced whole, so that is damage the caller must report."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    state = json.loads(text)
    if not isinstance(state, dict):
        raise ValueError(f"{path} holds {type(state).__name__}, not a JSON object")
    return state


def remove_journal(path: Path) -> None:
    """The job is done: remove its journal, on disk before this returns."""
    path.unlink(missing_ok=True)
    _journal_partial(path).unlink(missing_ok=True)
    sync_dir(path.parent)


def journal_files(path: Path) -> set[str]:
    """The names the journal at ``path`` may use in its folder (itself, and the copy a write in progress left)."""
    return {path.name, _journal_partial(path).name}


def _journal_partial(path: Path) -> Path:
    return path.with_name(path.name + ".tmp")


def salvage_aside(
    damaged: Path,
    journal: Path,
    new_aside: Callable[[], Path],
    move_aside: Callable[[Path], object],
    clear: Callable[[], None],
) -> Path:
    """The first steps of a ``--recover`` salvage of ``damaged`` (a file or folder), under its ``journal``; returns
    where the damaged files are, beside ``damaged``, for the caller to copy what it can read from them and then
    ``remove_journal``. A fresh salvage names its aside copy (``new_aside``) and records it (stage "moving"), moves
    the damaged files there (``move_aside``; after a stop, it moves those still in place), then records stage
    "copying". A salvage stopped while copying instead ``clear``s the new database it had begun, to be copied again
    from the start: nothing new is written before every damaged file is aside, so the stage tells the two apart."""
    state = read_journal(journal)
    if state is None:
        state = {"aside": new_aside().name, "stage": "moving"}
        write_journal(journal, state)
    aside = damaged.with_name(str(state["aside"]))
    if state["stage"] == "moving":
        move_aside(aside)
        write_journal(journal, {**state, "stage": "copying"})
    else:
        clear()
    return aside


def stopped_salvage(journal: Path, what: str, recover: bool) -> dict[str, Any] | None:
    """What a ``--recover`` stopped midway left in its ``journal`` (None: there is none), for the caller to finish.
    Without ``recover``, a ServiceError naming ``what`` (the database or file) and how to finish the job: a half
    rebuilt database must never be served as a whole one."""
    try:
        state = read_journal(journal)
    except (OSError, ValueError) as exc:
        raise ServiceError(f"{what} has an unreadable {journal.name}: {exc}") from exc
    if state is not None and not recover:
        raise ServiceError(
            f"{what} is half rebuilt: a --recover was stopped before it finished (the damaged files are in "
            f"{state.get('aside')}). Not starting on it: start with --recover again to finish it"
        )
    return state


@contextmanager
def replaced_whole(path: Path) -> Iterator[TextIO]:
    """A text file (UTF-8) to write ``path`` through, so that ``path`` only ever holds a whole file: it is written
    as ``<path>.partial``, fsynced and renamed over ``path`` when the block ends, and removed if the block raises.
    A run killed midway leaves ``path`` as it was (an older whole file, or nothing) and a ``.partial`` that the
    next run replaces. A path that exists and is not a regular file (``/dev/null``, a pipe) is written directly."""
    if path.exists() and not stat.S_ISREG(path.stat().st_mode):
        with path.open("w", encoding="utf-8", newline="") as out:
            yield out
        return
    with _through_partial(path, path.with_name(path.name + ".partial"), None) as raw:
        out = io.TextIOWrapper(raw, encoding="utf-8", newline="")
        try:
            yield out
        finally:
            out.detach()  # flushed; the file itself stays open for its fsync (or its removal)


def aside_path(path: Path) -> Path:
    """Where to move a damaged ``path`` (never deleted): ``<name>.damaged-<UTC time>``, with ``-2``, ``-3``... when
    that name (or a WAL file of it) is taken, so that a second salvage never replaces the first one's copy."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    for attempt in range(1, 1000):
        candidate = path.with_name(f"{path.name}.damaged-{stamp}" + (f"-{attempt}" if attempt > 1 else ""))
        if not any(candidate.parent.glob(candidate.name + "*")):
            return candidate
    raise FileExistsError(f"no free name beside {path} for its damaged copy")


def full_disk(path: Path, failure: str) -> str:
    """Why ``failure`` (opening or checking a data file at ``path``) is a full disk rather than a damaged file: a
    phrase such as "the file system of /var/lib/x is full (0 bytes free)", or "" when it is not. A start-up check
    asks before it calls a file damaged, so that nobody runs ``--recover`` (which needs space of its own) to cure a
    full disk."""
    directory = next((candidate for candidate in (path, *path.parents) if candidate.is_dir()), Path("."))
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        return ""
    if free >= NEARLY_FULL_BYTES and not names_full_disk(failure):
        return ""
    return f"the file system of {directory} is full ({free} bytes free)"


def full_disk_refusal(path: Path, failure: str, cannot: str) -> str:
    """The start-up refusal when ``failure`` (checking or opening the data at ``path``) is a full disk, else "":
    ``cannot`` says what could not be done ("the scheduler database in /x cannot be opened"), and the rest, the
    same for every role, says what to do instead of ``--recover``."""
    full = full_disk(path, failure)
    if not full:
        return ""
    return (
        f"{cannot}: {full} ({failure}). Free some space and start again; it is not known to be damaged, and "
        "--recover would need room for a second copy"
    )


def names_full_disk(failure: str) -> bool:
    """Whether a library's error message says that a disk is full (which disk, it may not say)."""
    return any(words in failure for words in _FULL_WORDS)


def full_disk_note(path: Path, failure: str) -> str:
    """``full_disk`` as the end of an error message: " (the file system of ... is full (N bytes free))", or ""."""
    full = full_disk(path, failure)
    return f" ({full})" if full else ""

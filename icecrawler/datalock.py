"""One data directory, one daemon: an exclusive ``flock`` on a lock file for as long as the daemon runs.

Two schedulers on one Berkeley DB environment, or two storage servers on one spool or store, corrupt each other
(the second one's recovery pulls the first one's environment from under it). So a daemon takes the lock before it
opens anything, and a second one refuses to start with a one-line error that names the holder.

The lock is an advisory ``flock``, not a pid file: the kernel drops it when the holder's process ends, however it
ends (``kill -9`` included), so a crashed daemon never leaves a stale lock behind. The file's text (pid, role, start
time) is only there to name the holder in the error. A file system that cannot lock at all (NFS without its lock
service) is said so in one line naming the file, never taken for a lock held by another process.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path
from types import TracebackType

from icecrawler.errors import ServiceError

__all__ = ["DataLock", "LockHeld", "LocksUnsupported", "try_lock"]


class LockHeld(ServiceError):
    """The lock is held by another live process (not: the lock could not be taken at all)."""


class LocksUnsupported(ServiceError):
    """The lock file's file system takes no locks at all (ENOLCK, EOPNOTSUPP): nobody holds it, nobody can."""


#: What ``flock`` answers on a file system that takes no locks at all; any other error may pass (EIO, a full lock
#: table) and is not taken for "never" by a caller that goes on without the lock.
_NO_LOCKS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP})


def try_lock(fd: int, path: Path) -> bool:
    """An exclusive ``flock`` on ``fd`` (the file ``path``) without waiting: True when taken, False when another
    process holds it. ENOLCK or EOPNOTSUPP (the file system does not lock) is LocksUnsupported naming
    ``path``: taken for "held", it sent the operator after a process that was not there."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        if exc.errno not in _NO_LOCKS:
            raise ServiceError(f"cannot lock {path}: {exc.strerror}") from exc
        raise LocksUnsupported(
            f"cannot lock {path}: {exc.strerror}: its file system does not support file locks (an NFS mount without "
            "its lock service?); use a folder on a local disk"
        ) from exc
    return True


class DataLock:
    """An exclusive lock on ``path`` (created if missing), taken by ``acquire`` and dropped by ``release``."""

    def __init__(self, path: str | Path, role: str, advice: str = "") -> None:
        """``advice``: what to do when the lock is held, for a taker that is not a daemon of its own (a tool that
        must read the directory cannot be given another one)."""
        self.path = Path(path)
        self.role = role
        self.advice = advice or (
            f"one data directory serves one {role}; stop that one first, or give this one its own directory"
        )
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this process holds the lock now."""
        return self._fd is not None

    def acquire(self) -> DataLock:
        """Take the lock, or raise LockHeld naming who holds it (ServiceError when it cannot be taken at all)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise ServiceError(f"cannot create the lock file {self.path}: {exc.strerror}") from exc
        try:
            taken = try_lock(fd, self.path)
            if not taken:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
        except BaseException:
            os.close(fd)
            raise
        if not taken:
            os.close(fd)
            raise LockHeld(f"{self.path.parent} is in use by {holder}: {self.advice}")
        try:
            os.ftruncate(fd, 0)
            os.pwrite(
                fd, f"{self.role} pid {os.getpid()} (started {time.strftime('%Y-%m-%dT%H:%M:%S%z')})\n".encode(), 0
            )
        except OSError:
            pass  # a full disk must not stop the daemon here: the lock itself holds, the text only names it
        self._fd = fd
        return self

    def release(self) -> None:
        """Drop the lock (the file stays: removing it could let a third process lock a different inode)."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> DataLock:
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()

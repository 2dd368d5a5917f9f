"""One data directory, one daemon: an exclusive ``flock`` on a lock file for as long as the daemon runs.

Two schedulers on one Berkeley DB environment, or two storage servers on one spool or store, corrupt each other
(the second one's recovery pulls the first one's environment from under it). So a daemon takes the lock before it
opens anything, and a second one refuses to start with a one-line error that names the holder.

The lock is an advisory ``flock``, not a pid file: the kernel drops it when the holder's process ends, however it
ends (``kill -9`` included), so a crashed daemon never leaves a stale lock behind. The file's text (pid, role, start
time) is only there to name the holder in the error.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from types import TracebackType

from icecrawler.errors import ServiceError

__all__ = ["DataLock"]


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

    def acquire(self) -> DataLock:
        """Take the lock, or raise ServiceError naming who holds it."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise ServiceError(f"cannot create the lock file {self.path}: {exc.strerror}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise ServiceError(f"{self.path.parent} is in use by {holder}: {self.advice}") from exc
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

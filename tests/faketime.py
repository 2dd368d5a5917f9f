"""A daemon whose wall clock a test can step from outside, as an NTP step or a clock set by hand would: Debian's
libfaketime preloaded into it, reading its offset from a file the test rewrites. Only the wall clock moves
(``FAKETIME_DONT_FAKE_MONOTONIC``): a real jump leaves the monotonic clock alone, and that difference is what
``icecrawler.clock.ClockJumpWatch`` notices.

libfaketime 0.9.10 with the monotonic clock left alone makes ``time.sleep`` fail with EINVAL in the faked process
(its ``clock_nanosleep`` with an absolute monotonic deadline); waits on events and locks work. The scheduler's
threads wait on events, so it runs as it does in production.

scripts/bootstrap.sh installs libfaketime (Debian package ``faketime``); without it the test is skipped with the
reason, and under CI the same condition fails instead (``tests.requirements``)."""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path

from tests.requirements import skip_or_fail

__all__ = ["FakedWallClock", "libfaketime"]

#: Where Debian (multiarch) and a source build put the library.
_LIBRARY_GLOBS = ("/usr/lib/*/faketime/libfaketime.so.1", "/usr/local/lib/faketime/libfaketime.so.1")


def libfaketime() -> str:
    """The path of libfaketime's shared library (skipped, or failed under CI, when it is not installed)."""
    for pattern in _LIBRARY_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    skip_or_fail("libfaketime is not installed: run scripts/bootstrap.sh (Debian package 'faketime')")


@dataclass
class FakedWallClock:
    """The offset file of one faked wall clock; ``wrap`` a command line to run it on that clock."""

    offset_file: Path

    def __post_init__(self) -> None:
        self.library = libfaketime()
        self.step_to(0)

    def step_to(self, offset_s: int) -> None:
        """Set the faked wall clock to ``offset_s`` seconds from the real one (the process sees it within a
        second: libfaketime re-reads the file at most once a second)."""
        self.offset_file.write_text(f"{offset_s:+d}\n")

    def wrap(self, argv: list[str]) -> list[str]:
        return [
            "env",
            f"LD_PRELOAD={self.library}",
            f"FAKETIME_TIMESTAMP_FILE={self.offset_file}",
            "FAKETIME_DONT_FAKE_MONOTONIC=1",
            "FAKETIME_CACHE_DURATION=1",
            *argv,
        ]

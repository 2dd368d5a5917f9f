"""Progress lines on stderr for the long revisit runs, so a user sees what runs and how far it is (stdout keeps the
report alone, for redirecting into a file)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

__all__ = ["Progress", "starmap_with_progress"]


class Progress:
    """``[revisit 12s] what`` lines on stderr, timed from the start of the run."""

    def __init__(self, name: str = "revisit") -> None:
        self.name = name
        self.started = time.monotonic()

    def say(self, what: str) -> None:
        print(f"[{self.name} {time.monotonic() - self.started:.0f}s] {what}", file=sys.stderr, flush=True)

    def count[T](self, what: str, results: Iterable[T], total: int) -> Iterator[T]:
        """Yield ``results`` and say ``what k/total`` after the first, about ten times on the way and at the end,
        with the time left at the pace so far: a run on a large trace file can take hours, and its user should
        know after one job, not at the end, whether to cut it (``--targets``, ``--quick``)."""
        step = max(1, total // 10)
        started = time.monotonic()
        for done, result in enumerate(results, 1):
            if done == 1 or done % step == 0 or done == total:
                left = (time.monotonic() - started) / done * (total - done)
                self.say(f"{what} {done}/{total}" + (f", about {_duration(left)} left" if done < total else ""))
            yield result


def _duration(seconds: float) -> str:
    """``40 s``, ``12 min``, ``3.5 h``: a time left, as precise as a guess from a few jobs deserves."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _star(job: tuple[Callable[..., Any], Sequence[Any]]) -> Any:
    function, args = job
    return function(*args)


def starmap_with_progress[T](
    pool: Any, function: Callable[..., T], jobs: Sequence[Sequence[Any]], progress: Progress, what: str
) -> list[T]:
    """``pool.starmap(function, jobs)``, in order, saying how many jobs are done as they finish."""
    results = pool.imap(_star, [(function, tuple(job)) for job in jobs])
    return list(progress.count(what, results, len(jobs)))

"""A stand-in Prometheus for the metrics cost benchmarks: scrapes one or more /metrics URLs once a second on a
thread (15 times Prometheus' default rate, so the measured cost is an upper bound of what scraping adds)."""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Sequence

__all__ = ["Scraper"]


class Scraper:
    """Scrapes ``urls`` every ``interval_s`` until ``stop``; no URLs: does nothing."""

    def __init__(self, urls: Sequence[str], interval_s: float = 1.0) -> None:
        self.urls = [url for url in urls if url]
        self.interval_s = interval_s
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scraper", daemon=True)
        if self.urls:
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            for url in self.urls:
                try:
                    with urllib.request.urlopen(url, timeout=5) as answer:
                        answer.read()
                    self.count += 1
                except OSError:
                    pass

    def stop(self) -> int:
        """Stop scraping; how many scrapes succeeded."""
        self._stop.set()
        if self.urls:
            self._thread.join(timeout=10)
        return self.count

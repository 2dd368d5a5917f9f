"""Four client processes hammer one host; a stand-in HTTP server on loopback records when each request
arrives. No two fetches of that host are closer than scheduler.host_spacing_s."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from icecrawler import rpc
from tests.helpers import serving_http, wait_for
from tests.scheduler.daemon import scheduler_daemon, scheduler_proxy

pytestmark = [pytest.mark.ice, pytest.mark.bdb, pytest.mark.e2e, pytest.mark.slow]

C = rpc.crawler()
SPACING_S = 0.3
FETCHES = 12


@contextmanager
def recording_site() -> Iterator[tuple[str, list[float]]]:
    """An HTTP server on 127.0.0.1 that answers 200 and appends each request's arrival time."""
    arrivals: list[float] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with lock:
                arrivals.append(time.time())
            body = b"[]"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

    with serving_http(Handler) as url:
        yield f"{url}/jd", arrivals


def test_four_clients_never_fetch_one_host_closer_than_the_spacing(tmp_path: Path) -> None:
    with (
        recording_site() as (base_url, arrivals),
        scheduler_daemon(
            tmp_path,
            scheduler__host_spacing_s=SPACING_S,
            sources__jd__base_url=base_url,
            scheduler__policy="fixed",
            scheduler__min_period_s=0.01,
            scheduler__initial_period_s=0.01,
        ) as daemon,
    ):
        with scheduler_proxy(daemon) as prx:
            prx.addUsers([f"jd:{n}" for n in range(6)], C.TaskKind.ProductReviews)
        # The workers run until stopped below (their own bound is far past the wait's): how long four Python
        # processes take to start is the machine's business, not the spacing's.
        clients = [
            daemon.client(f"fetch-{n}", "fetch", "--name", f"f{n}", "--base-url", base_url, "--seconds", "600")
            for n in range(4)
        ]
        try:
            wait_for(lambda: len(arrivals) >= FETCHES, lambda: f"only {len(arrivals)} fetches arrived", 120, 0.05)
        finally:
            for client in clients:
                client.stop()
    assert len(arrivals) >= FETCHES
    gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
    assert min(gaps) >= SPACING_S, f"gaps {[round(g, 3) for g in gaps]}"

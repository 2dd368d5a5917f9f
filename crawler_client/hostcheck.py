"""The client's sites against the scheduler's: checked once at start-up, in the background.

The scheduler shards, spaces, holds and blocks tasks by the host of each source's ``sources.<name>.base_url`` in
*its* settings; a client fetches from the ``base_url`` in *its own*. When the two differ (a client started without
the scheduler's config file, so on the sandbox's defaults), the client crawls other sites than the scheduler
believes, and nothing else says so: every crawl fails with ConnectionError, or succeeds against the wrong site.
The client asks a scheduler for its hosts (``stats``: ``detail.source_hosts``) until one answers, and logs one
WARNING naming each source whose host differs. The check never delays or stops the client.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from icecrawler.settings import Settings
from icecrawler.shards import source_hosts

__all__ = ["ATTEMPTS", "RETRY_S", "check_once", "differing_hosts", "start_host_check"]

log = logging.getLogger(__name__)

#: How often, and how far apart, the background check asks while no scheduler answers (bounded: 5 minutes).
ATTEMPTS = 30
RETRY_S = 10.0
#: A stats call that takes longer than this is given up (the scheduler may be busy starting).
CALL_TIMEOUT_MS = 5000


def differing_hosts(theirs: Mapping[str, str], ours: Mapping[str, str]) -> list[str]:
    """One line per source both sides know whose host differs (sources only one side knows are not compared)."""
    return [
        f"{source}: the scheduler's {theirs[source]!r}, this client's {ours[source]!r}"
        for source in sorted(theirs)
        if source in ours and str(theirs[source]) != ours[source]
    ]


def check_once(proxy: Any, ours: Mapping[str, str]) -> list[str] | None:
    """The differences with one scheduler, or None when it did not answer (or is too old to say its hosts)."""
    try:
        detail = json.loads(proxy.ice_invocationTimeout(CALL_TIMEOUT_MS).stats().detailJson or "{}")
    except Exception as exc:  # Ice's own and ours alike: a check that cannot run is no reason to stop a client
        log.debug("host check: the scheduler did not answer (%s)", exc)
        return None
    theirs = detail.get("source_hosts") if isinstance(detail, dict) else None
    return differing_hosts(theirs, ours) if isinstance(theirs, dict) else None


def start_host_check(proxies: Sequence[Any], settings: Settings, stop: threading.Event) -> threading.Thread:
    """Run the check in a daemon thread: every ``RETRY_S`` until a scheduler answers, at most ``ATTEMPTS``
    times, or until ``stop`` is set."""
    ours = source_hosts(settings)

    def run() -> None:
        for _ in range(ATTEMPTS):
            for proxy in proxies:
                differ = check_once(proxy, ours)
                if differ is None:
                    continue
                if differ:
                    log.warning(
                        "this client fetches from other sites than the scheduler assigns its tasks by (give it the "
                        "scheduler's config file: sources.* must match, docs/DEPLOY.md): %s",
                        "; ".join(differ),
                    )
                return
            if stop.wait(RETRY_S):
                return

    thread = threading.Thread(target=run, name="host-check", daemon=True)
    thread.start()
    return thread

"""Prometheus file-based service discovery for icecrawler daemons (``icecrawler targets``).

Clients come and go, and several share a machine (each takes the first free port of
``metrics.client.port`` .. ``+ port_span - 1``), so nobody lists them by hand: this probes every port a role may
use on each given host, keeps those whose ``/metrics`` answers with that role's metrics, and writes one
``<role>.json`` per role in Prometheus' file-SD format. Prometheus re-reads the files when they change
(``deploy/prometheus/prometheus.yml``); run it from cron or with ``--every``, whose loop reports a write refused
(another run writing the same file) and writes again at its next round.

Schedulers and storage servers stay listed once seen (``STICKY_ROLES``): a dead one must stay a target whose ``up``
is 0, or its alerts go quiet as it dies (``IcecrawlerTargetDown`` needs a target to be down). ``forget`` drops one
taken out of service. Clients come and go with the work, so their list is only what answers now.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from icecrawler.durable import WriteInProgress, replaced_whole
from icecrawler.metrics import MetricsConfig
from icecrawler.settings import Settings

__all__ = [
    "PROBE_TIMEOUT_S",
    "ROLES",
    "STICKY_ROLES",
    "candidate_ports",
    "discover",
    "keep_listed",
    "listed",
    "probe",
    "write_targets",
]

ROLES = ("scheduler", "storage", "client")
#: Roles whose daemons stay in the lists once seen, answering or not (see the module docstring).
STICKY_ROLES = frozenset({"scheduler", "storage"})
#: How long a probe waits for ``/metrics`` to answer. A daemon left out of the lists is a target Prometheus stops
#: scraping, so its alerts go quiet instead of firing: a busy daemon (a client loading its tokenizer, a scheduler in
#: a rebalance) must not drop out for a slow second. Closed ports answer at once, so the wait costs only on
#: daemons that are there.
PROBE_TIMEOUT_S = 5.0


def candidate_ports(settings: Settings, role: str) -> list[int]:
    """Every port a daemon of ``role`` may listen on (scheduler shards add their index to the port)."""
    config = MetricsConfig.from_settings(settings, role)
    if config.port == 0:
        return []
    extra = settings.get_int("scheduler.shards") - 1 if role == "scheduler" else 0
    return list(range(config.port, min(65536, config.port + config.port_span + extra)))


def probe(host: str, port: int, role: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether ``http://host:port/metrics`` answers with ``role``'s metrics."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout_s) as answer:
            return f"icecrawler_{role}_".encode() in answer.read(1_000_000)
    except (OSError, urllib.error.URLError, ValueError):
        return False


def discover(settings: Settings, hosts: Sequence[str], timeout_s: float = PROBE_TIMEOUT_S) -> dict[str, list[str]]:
    """``host:port`` of every answering daemon, by role."""
    candidates = [(role, host, port) for role in ROLES for host in hosts for port in candidate_ports(settings, role)]
    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(lambda c: probe(c[1], c[2], c[0], timeout_s), candidates))
    found: dict[str, list[str]] = {role: [] for role in ROLES}
    for (role, host, port), ok in zip(candidates, answers, strict=True):
        if ok:
            found[role].append(f"{host}:{port}")
    return found


def write_targets(directory: Path, found: dict[str, list[str]]) -> list[Path]:
    """Write ``<role>.json`` (file-SD format) for each role, atomically (Prometheus never reads half a file). A file
    another run is writing (WriteInProgress) does not keep the other roles' files from being written: the refusals
    are raised together once they are, as one WriteInProgress. Any other failure (a file system without locks, a full
    disk) is raised at once: trying the next file, or the next round, does not mend it."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    refused = []
    for role, targets in found.items():
        path = directory / f"{role}.json"
        try:
            with replaced_whole(path) as out:
                out.write(json.dumps([{"targets": targets, "labels": {"role": role}}], indent=1) + "\n")
        except WriteInProgress as exc:
            refused.append(str(exc))
            continue
        written.append(path)
    if refused:
        raise WriteInProgress("; ".join(refused))
    return written


def listed(directory: Path, role: str) -> list[str]:
    """The targets ``<role>.json`` lists now ([] if there is no such file or it is not a list we wrote)."""
    try:
        groups = json.loads((directory / f"{role}.json").read_text(encoding="utf-8"))
        return [str(target) for group in groups for target in group["targets"]]
    except (OSError, ValueError, TypeError, KeyError):
        return []


def keep_listed(
    directory: Path, found: dict[str, list[str]], hosts: Sequence[str], forget: Sequence[str] = ()
) -> tuple[dict[str, list[str]], dict[str, list[str]], dict[str, list[str]]]:
    """(what to write, listed daemons that did not answer, listed daemons not probed): ``found``, plus for
    ``STICKY_ROLES`` every target already listed in ``directory`` that is not in ``forget``: silent when its host
    is one of ``hosts`` (probed, no answer), not probed when it is not (another run's hosts; kept as they were).
    ``forget`` drops only listed daemons that did not answer: one that answers is written like any other (taking a
    live daemon out of the lists would stop Prometheus scraping it)."""
    dropped = set(forget)
    probed = set(hosts)
    lists: dict[str, list[str]] = {}
    silent: dict[str, list[str]] = {}
    unprobed: dict[str, list[str]] = {}
    for role, targets in found.items():
        before = listed(directory, role) if role in STICKY_ROLES else []
        kept = [t for t in before if t not in targets and t not in dropped]
        lists[role] = sorted(set(targets)) + kept
        silent[role] = [t for t in kept if t.rpartition(":")[0] in probed]
        unprobed[role] = [t for t in kept if t not in silent[role]]
    return lists, silent, unprobed

"""kill -9 of any daemon, at random moments, while every source is crawled: the demo's world (Weibo users on all
three front ends, ECSHOP products behind a members' login, JD products, an ECSHOP listing that discovers products)
with the scheduler, the storage server and the clients each killed several times, sometimes all at once, and the
servers restarted on their own data after outages both shorter and longer than the clients' timeouts. Between the
kills the operator acts too: a seeded target is removed (often while it is being crawled) and seeded again, and the
sites' host is held and lifted.

After the last kill the crawl drains, and the one oracle judges it as the demo does: every item published before the
cut-off is stored exactly once and nothing else is. The scheduler's completion log shows no task leased to two
clients at once, its queues pass their consistency check, the clients that were not killed rode out every restart and
exit 0 on SIGTERM, and no process logged a traceback."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from icecrawler.processes import ManagedProcess
from icecrawler_local.demo import DEMO_CLIENT, DEMO_SCHEDULER, seed_ids, summarize
from icecrawler_local.oracle import overlapping_leases
from icecrawler_local.stack import Stack, running_stack
from sandbox.scenario import default_scenario
from scheduler_server.core import check_consistency
from scheduler_server.store import BdbQueueStore
from tests.helpers import restart

pytestmark = [pytest.mark.e2e, pytest.mark.ice, pytest.mark.bdb, pytest.mark.slow]

SPEED = 60.0
#: The kills, in a seeded random order: each daemon several times, and everything at once twice; and the operator's
#: actions between them.
VICTIMS = ["scheduler"] * 4 + ["storage"] * 4 + ["client"] * 6 + ["everything"] * 2 + ["operator"] * 3
CLIENTS = 2
DRAIN_TIMEOUT_S = 180.0


def outage_s(rng: random.Random) -> float:
    """Most restarts come at once; some after longer than a client's request timeout (5 s in the demo)."""
    return rng.uniform(0.0, 1.0) if rng.random() < 0.7 else rng.uniform(6.0, 9.0)


class Chaos:
    """Kills and restarts the stack's daemons; keeps every process it started, for the logs."""

    def __init__(self, stack: Stack, rng: random.Random) -> None:
        self.stack = stack
        self.rng = rng
        self.started = 0
        self.processes: list[ManagedProcess] = [stack.scheduler, stack.storage]
        self.killed_clients: set[str] = set()
        self.operations = 0

    def start_client(self) -> None:
        self.started += 1
        self.processes.append(self.stack.start_client(f"client-{self.started}"))

    def live_clients(self) -> list[str]:
        return [name for name, process in self.stack.clients.items() if process.alive()]

    def kill_client(self) -> None:
        name = self.rng.choice(self.live_clients())
        self.stack.kill_client(name)
        self.killed_clients.add(name)
        self.start_client()

    def kill_server(self, name: str) -> None:
        """kill -9 one server, wait out the outage, start it again on the same port and data."""
        process = self.stack.scheduler if name == "scheduler" else self.stack.storage
        assert process.alive(), f"the {name} was already dead before its kill"
        process.kill9()
        time.sleep(outage_s(self.rng))
        self.restart_server(name, process)

    def restart_server(self, name: str, process: ManagedProcess) -> None:
        port = self.stack.scheduler_port if name == "scheduler" else self.stack.storage_port
        again = restart(self.stack, process, port)
        self.processes.append(again)
        setattr(self.stack, name, again)

    def kill_everything(self) -> None:
        servers = [self.stack.scheduler, self.stack.storage]
        for name in self.live_clients():
            self.stack.kill_client(name)
            self.killed_clients.add(name)
        for process in servers:
            process.kill9()
        time.sleep(outage_s(self.rng))
        self.restart_server("scheduler", servers[0])
        self.restart_server("storage", servers[1])
        for _ in range(CLIENTS):
            self.start_client()

    def operate(self, seeded: list[str]) -> None:
        """Remove a seeded target and seed it again (its tasks start afresh: every item is fetched and stored
        again, idempotently), then hold the sites' host for a moment and lift the hold."""
        target = self.rng.choice(seeded)
        removed = self.stack.icecrawler("remove", target)
        assert ": 1 removed of 1" in removed, removed
        time.sleep(self.rng.uniform(0.0, 1.5))
        self.stack.seed([target])
        host = next(iter(self.stack.scheduler_stats()["hosts"]), "")
        if host:
            self.stack.icecrawler("hold", host, "--for", "1h", "--reason", "chaos test")
            time.sleep(self.rng.uniform(0.0, 1.5))
            self.stack.icecrawler("hold", host, "--lift")
        self.operations += 1

    def kill(self, victim: str) -> None:
        self.stack.close()  # the stack's own Ice connection to the scheduler is re-made after a restart
        if victim == "client":
            self.kill_client()
        elif victim == "everything":
            self.kill_everything()
        else:
            self.kill_server(victim)


def test_kill_9_of_any_daemon_at_any_moment_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    rng = random.Random(20261205)
    victims = VICTIMS.copy()
    rng.shuffle(victims)
    scenario = default_scenario()
    ids, listings, _ = seed_ids(scenario)
    with running_stack(
        tmp_path, scenario, speed=SPEED, scheduler_settings=DEMO_SCHEDULER, client_settings=DEMO_CLIENT
    ) as stack:
        chaos = Chaos(stack, rng)
        stack.seed(ids, listings)
        for _ in range(CLIENTS):
            chaos.start_client()
        time.sleep(5.0)  # the first crawls are under way
        for victim in victims:
            time.sleep(rng.uniform(0.3, 3.0))
            if victim == "operator":
                chaos.operate(ids)
            else:
                chaos.kill(victim)
        cutoff_wall_ms = int(time.time() * 1000)
        drain_end = time.monotonic() + DRAIN_TIMEOUT_S
        result = summarize(stack, cutoff_wall_ms, with_fetches=False)
        while not result.ok and time.monotonic() < drain_end:
            time.sleep(2.0)
            result = summarize(stack, cutoff_wall_ms, with_fetches=False)
        survivors = chaos.live_clients()
        codes = {name: stack.clients[name].stop(timeout_s=20) for name in survivors}
        stack.stop_scheduler()
        done = stack.done_log()
        store = BdbQueueStore(stack.scheduler_db, durable=False)
        try:
            _, queue_problems = check_consistency(store)
        finally:
            store.close()
        logs = "\n".join(process.log_path.read_text(errors="replace") for process in chaos.processes)

    table = {name: (s.published, s.stored, s.duplicates) for name, s in result.sources.items()}
    assert result.ok, f"lost or stored twice across the kills (published, stored, duplicates): {table}"
    assert all(source.published > 0 for source in result.sources.values()), table
    assert not [s for s in result.sources.values() if s.duplicates], table
    assert queue_problems == [], queue_problems[:5]
    assert not overlapping_leases(done), overlapping_leases(done)[:3]
    assert len(done) > len(ids), "the crawl barely ran between the kills"
    assert len(chaos.killed_clients) >= VICTIMS.count("client"), chaos.killed_clients
    assert chaos.operations == VICTIMS.count("operator")
    assert set(stack.clients) == chaos.killed_clients | set(survivors), "a client died without being killed"
    assert survivors and codes == dict.fromkeys(survivors, 0), codes
    assert "Traceback" not in logs, logs[-4000:]

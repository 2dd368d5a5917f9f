"""A client against a scheduler built from another version of the Slice contract (a real Ice server on loopback,
its ``crawler.ice`` changed the way a release changes it: a struct field added or gone). Ice encodes structs
without tags, so neither side can read the other; the client's error must say that, not "cannot reach"."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from crawler_client.gateways import IceScheduler
from icecrawler import rpc
from icecrawler.errors import ServiceError
from icecrawler.models import Report
from icecrawler.processes import free_port, wait_for_port

pytestmark = [pytest.mark.ice]

#: A scheduler whose Task lacks ``leaseS`` (as before it was added) and whose Report has one more field.
_OTHER_SCHEDULER = """
import sys, Ice
Ice.loadSlice(["-I" + str(Ice.getSliceDir()), sys.argv[1]])
import Crawler

class Scheduler(Crawler.Scheduler):
    def getUser(self, workerId, current):
        return Crawler.Task(id="reviews:jd:1", kind=Crawler.TaskKind.ProductReviews, source="jd", target="1",
                            leaseToken="t", leaseDeadlineMs=1, periodS=60.0)
    def getUsers(self, workerId, count, current):
        return [self.getUser(workerId, current)]
    def putUsers(self, reports, current):
        pass

for name in Crawler.Scheduler.__abstractmethods__ - set(vars(Scheduler)):
    setattr(Scheduler, name, lambda self, *args: None)
Scheduler.__abstractmethods__ = frozenset()

with Ice.initialize(["--Ice.Default.Host=127.0.0.1"]) as comm:
    adapter = comm.createObjectAdapterWithEndpoints("other", f"tcp -h 127.0.0.1 -p {sys.argv[2]}")
    adapter.add(Scheduler(), Ice.stringToIdentity("scheduler"))
    adapter.activate()
    comm.waitForShutdown()
"""


def other_contract(directory: Path) -> Path:
    text = rpc.SLICE_FILE.read_text()
    task_field = "        double leaseS = 0.0;\n"
    report_field = "        string errorClass;\n"
    assert task_field in text and report_field in text, "the contract changed: update this test's edits"
    changed = text.replace(task_field, "").replace(report_field, report_field + "        string addedLater;\n")
    path = directory / "crawler.ice"
    path.write_text(changed)
    return path


@contextmanager
def other_scheduler(directory: Path) -> Iterator[str]:
    port = free_port()
    argv = [sys.executable, "-c", _OTHER_SCHEDULER, str(other_contract(directory)), str(port)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as server:
        try:
            wait_for_port("127.0.0.1", port, 30, alive=lambda: server.poll() is None)
            yield f"scheduler:tcp -h 127.0.0.1 -p {port} -t 5000"
        finally:
            server.kill()


def test_a_scheduler_of_another_contract_version_is_named_as_such(tmp_path: Path) -> None:
    with other_scheduler(tmp_path) as proxy, rpc.communicator() as comm:
        scheduler = IceScheduler(rpc.crawler().SchedulerPrx(comm, proxy))
        for call in (lambda: scheduler.lease("w", 2), lambda: scheduler.report([Report("reviews:jd:1", "t")])):
            with pytest.raises(ServiceError) as caught:
                call()
            message = str(caught.value)
            assert "Slice contracts differ: run one version on every role" in message, message
            assert "cannot reach" not in message

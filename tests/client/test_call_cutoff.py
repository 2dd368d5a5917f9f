"""``CallCutoff`` against a real scheduler daemon that stops answering (SIGSTOP: its kernel still takes the bytes,
so nothing fails and Ice waits out its timeouts, ten minutes here): the call in flight ends at the cutoff's
deadline as a CallCutError (a ServiceError) that says so and that it was sent, a call after the deadline is not
sent, and calls answered in time are untouched. What the stopping client daemon builds on
(``tests/client/test_runtime_outages.py`` runs it whole)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from crawler_client.gateways import CallCutError, CallCutoff, IceScheduler
from icecrawler import rpc
from tests.helpers import LONG_ICE_WAITS
from tests.scheduler.daemon import ICE_TEST_SETTINGS, scheduler_daemon, scheduler_proxy

pytestmark = [pytest.mark.ice, pytest.mark.bdb]


def test_a_call_to_a_server_that_stopped_answering_ends_at_the_cutoff(tmp_path: Path) -> None:
    with scheduler_daemon(tmp_path, **ICE_TEST_SETTINGS) as daemon:
        with scheduler_proxy(daemon) as proxy:
            assert proxy.addUsers(["jd:1", "jd:2"], rpc.crawler().TaskKind.ProductReviews) == 2
        assert daemon.process is not None
        with rpc.communicator(properties=LONG_ICE_WAITS) as comm:
            cutoff = CallCutoff()
            scheduler = IceScheduler(rpc.crawler().SchedulerPrx(comm, daemon.proxy), cutoff)
            leased = scheduler.lease("w1", 2)  # answered in time: untouched by a cutoff not yet cut
            assert sorted(task.id for task in leased) == ["reviews:jd:1", "reviews:jd:2"]
            outcome: list[BaseException | None] = []

            def release() -> None:
                try:
                    scheduler.release([(leased[0].id, leased[0].lease_token)])
                    outcome.append(None)
                except Exception as exc:
                    outcome.append(exc)

            os.kill(daemon.process.pid, signal.SIGSTOP)
            try:
                caller = threading.Thread(target=release, name="caller", daemon=True)
                caller.start()
                caller.join(1.0)
                assert caller.is_alive(), f"the stopped scheduler answered: {outcome}"
                cutoff.cut(time.monotonic())
                caller.join(30)
                assert not caller.is_alive(), "the call outlived its cutoff"
                with pytest.raises(CallCutError, match="releaseUsers to the scheduler not sent: past") as not_sent:
                    scheduler.release([(leased[1].id, leased[1].lease_token)])
                assert not not_sent.value.sent  # nothing reached the server
            finally:
                os.kill(daemon.process.pid, signal.SIGCONT)
            assert len(outcome) == 1 and isinstance(outcome[0], CallCutError), outcome
            assert outcome[0].sent  # sent, then abandoned: the server may still act on it
            assert "did not answer releaseUsers before this client's stop deadline" in str(outcome[0])
            # The server is back: a gateway without a cutoff (an operator's command) gets its answer, and the call
            # that was not sent left its lease alone.
            IceScheduler(rpc.crawler().SchedulerPrx(comm, daemon.proxy)).release(
                [(leased[1].id, leased[1].lease_token)]
            )

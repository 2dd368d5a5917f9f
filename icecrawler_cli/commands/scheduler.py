"""``icecrawler scheduler``: run the scheduler daemon (Berkeley DB queues, leases, politeness, accounts)."""

from __future__ import annotations

from icecrawler.settings import Settings
from icecrawler_cli.commands import DaemonCommand


class Command(DaemonCommand):
    summary = "run the scheduler server (task queues in Berkeley DB, leases, politeness, account pool)"
    description = (
        "Serve Crawler::Scheduler (adapter SchedulerAdapter, identity 'scheduler', default endpoints "
        "tcp -h 127.0.0.1 -p 10000) until SIGTERM/SIGINT. State lives in scheduler.db_dir and is "
        "recovered on start. To use more cores, run it as N shards (--set scheduler.shards=N --set "
        "scheduler.shard=K, each with its own db_dir and endpoints; docs/DEPLOY.md). Example: "
        "icecrawler scheduler --Ice.Config=deploy/scheduler.conf --set scheduler.host_spacing_s=1"
    )
    role = "scheduler"
    adapter = "SchedulerAdapter"
    default_port = 10000
    recover_help = (
        "start on a queue database whose logs are missing or that fails its check: move it aside and copy every "
        "readable record into a new one; finish such a rebuild that was stopped"
    )

    def serve(self, settings: Settings, ice_args: list[str], listen: str) -> int:
        from scheduler_server.server import run

        return run(settings, ice_args, listen=listen)

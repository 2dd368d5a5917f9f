"""Each scheduler shard daemon serves its own /metrics at ``metrics.scheduler.port`` + its shard index, and
``icecrawler targets`` finds both from the shared settings."""

from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path

import pytest

from icecrawler.processes import ProcessGroup, icecrawler_argv, wait_for_port
from icecrawler.settings import Settings
from icecrawler.targets import discover
from tests.observability.prom import consecutive_free_ports, promtool_check
from tests.scheduler.daemon import SchedulerDaemon

pytestmark = [pytest.mark.ice, pytest.mark.bdb]


def test_two_shards_serve_metrics_at_port_plus_shard(tmp_path: Path) -> None:
    base = consecutive_free_ports(2)
    with ProcessGroup(tmp_path / "logs") as group:
        for shard in range(2):
            (tmp_path / f"shard{shard}").mkdir()
            daemon = SchedulerDaemon(
                group,
                tmp_path / f"shard{shard}",
                {"scheduler.shards": "2", "scheduler.shard": str(shard), "metrics.scheduler.port": str(base)},
            )
            daemon.start()
            assert daemon.process is not None
            wait_for_port("127.0.0.1", base + shard, 30, alive=daemon.process.alive)
        for shard in range(2):
            with urllib.request.urlopen(f"http://127.0.0.1:{base + shard}/metrics", timeout=10) as answer:
                text = answer.read().decode()
            assert "icecrawler_scheduler_tasks{" in text
            promtool_check(text)
        settings = Settings().copy_with(
            scheduler__shards=2, metrics__scheduler__port=base, metrics__storage__port=0, metrics__client__port=0
        )
        assert discover(settings, ["127.0.0.1"]) == {
            "scheduler": [f"127.0.0.1:{base}", f"127.0.0.1:{base + 1}"],
            "storage": [],
            "client": [],
        }
        done = subprocess.run(
            icecrawler_argv(
                "targets",
                "--dir",
                str(tmp_path / "t"),
                "--set=scheduler.shards=2",
                f"--set=metrics.scheduler.port={base}",
                "--set=metrics.storage.port=0",
                "--set=metrics.client.port=0",
            ),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0 and "scheduler=2 storage=0 client=0" in done.stdout, done.stdout + done.stderr

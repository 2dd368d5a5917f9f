"""Run the sandbox as a child process (end-to-end tests, the demo, the benchmarks), cleaned up by
``icecrawler.processes`` like every other daemon."""

from __future__ import annotations

import contextlib
import json
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from icecrawler.processes import ManagedProcess, ProcessGroup, free_port, icecrawler_argv

__all__ = ["SandboxProcess", "sandbox_argv", "sandbox_process"]


def sandbox_argv(
    port: int,
    *,
    scenario: str | Path | None = None,
    speed: float | None = None,
    origin: float | None = None,
    latency_ms: int | None = None,
    seed: int | None = None,
    truth_file: str | Path | None = None,
    misbehave: Sequence[str] = (),
    max_hang_s: float | None = None,
    traces: str | Path | None = None,
    traces_limit: int | None = None,
    traces_backlog_days: float | None = None,
    traces_weibo_site: str | None = None,
    traces_shop: str | None = None,
    traces_source: str | None = None,
) -> list[str]:
    """argv for ``icecrawler sandbox`` with these options (None = the setting's default)."""
    argv = icecrawler_argv("sandbox", "--port", str(port))
    for flag, value in (
        ("--scenario", scenario),
        ("--speed", speed),
        ("--clock-origin", origin),
        ("--latency-ms", latency_ms),
        ("--seed", seed),
        ("--truth-file", truth_file),
        ("--max-hang-s", max_hang_s),
        ("--traces", traces),
        ("--traces-limit", traces_limit),
        ("--traces-backlog-days", traces_backlog_days),
        ("--traces-weibo-site", traces_weibo_site),
        ("--traces-shop", traces_shop),
        ("--traces-source", traces_source),
    ):
        if value is not None:
            argv += [flag, str(value)]
    for spec in misbehave:
        argv += ["--misbehave", spec]
    return argv


@dataclass
class SandboxProcess:
    """A running sandbox child: its URL and a tiny client for the control endpoints."""

    process: ManagedProcess
    port: int
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def base_url(self, prefix: str) -> str:
        return f"{self.url}/{prefix}"

    def control(self, path: str, payload: dict[str, Any] | None = None, timeout_s: float = 10.0) -> Any:
        """GET (or POST ``payload`` to) ``/__sandbox/<path>`` and decode the JSON answer."""
        data = json.dumps(payload).encode() if payload is not None else None
        request = urllib.request.Request(
            f"{self.url}/__sandbox/{path.lstrip('/')}", data=data, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return json.loads(response.read())


@contextlib.contextmanager
def sandbox_process(
    log_dir: Path, *, port: int | None = None, group: ProcessGroup | None = None, name: str = "sandbox", **options: Any
) -> Iterator[SandboxProcess]:
    """Start ``icecrawler sandbox`` on ``port`` (a free one by default), wait until it listens, stop it after.

    ``options`` are ``sandbox_argv``'s keywords. With ``group`` the process joins it (and the group stops it);
    otherwise it is stopped when the block ends.
    """
    port = port or free_port()
    owned = group is None
    group = group or ProcessGroup(log_dir)
    try:
        with group.running(name, sandbox_argv(port, **options), port) as process:
            yield SandboxProcess(process, port)
    finally:
        if owned:
            group.stop_all()

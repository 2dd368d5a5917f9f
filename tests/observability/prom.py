"""A real Prometheus (Debian's ``prometheus`` package) for the observability tests: its config made from
``deploy/prometheus`` with test-sized intervals, started as a child process on a free loopback port, and its
HTTP API."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from icecrawler.processes import ManagedProcess, ProcessGroup, free_port
from tests.requirements import skip_or_fail

__all__ = [
    "DEPLOY",
    "Prometheus",
    "consecutive_free_ports",
    "documented",
    "prometheus_binary",
    "prometheus_config",
    "promtool",
    "promtool_check",
    "scaled_durations",
    "scrape",
    "short_rules",
    "static_targets",
]

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def documented(series: str, doc: str) -> bool:
    """Whether DEPLOY.md names a series: without ``icecrawler_<role>_``, a histogram's ``_bucket``/``_count``/``_sum``
    or a ``_created`` series (a counter's or histogram's start time), followed by a backtick or its labels."""
    name = series.split("_", 2)[2]
    stems = {name}
    for suffix in ("_bucket", "_count", "_sum", "_created"):
        if name.endswith(suffix):
            stems |= {name[: -len(suffix)], name[: -len(suffix)] + "_total"}
    return any(re.search(rf"`{re.escape(stem)}[`{{]", doc) for stem in stems)


def scrape(url: str) -> str:
    """The exposition text a /metrics endpoint answers."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        return str(answer.read().decode())


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:  # scripts/bootstrap.sh installs it: CI and `make test` fail without it (tests.requirements)
        skip_or_fail(f"{name} is not installed: run scripts/bootstrap.sh (Debian package 'prometheus')")
    return path


def prometheus_binary() -> str:
    return _binary("prometheus")


def promtool() -> str:
    return _binary("promtool")


def short_rules(text: str, hold_s: int = 2, window_s: int | None = 20) -> str:
    """The alert rules with test-sized durations: every ``for:`` becomes ``hold_s`` and, unless ``window_s`` is
    None, every range window ``window_s`` (the expressions are otherwise the deployed ones)."""
    text = re.sub(r"for: \d+[smh]", f"for: {hold_s}s", text)
    return text if window_s is None else re.sub(r"\[\d+[smh]\]", f"[{window_s}s]", text)


#: Seconds per unit of a Prometheus duration that ``scaled_durations`` scales (``ms`` it refuses).
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_DURATION = re.compile(r"(\d+)([smhdwy])")
#: A range window or subquery ``[range]``/``[range:step]``, and an ``offset`` (perhaps negative).
_RANGE = re.compile(r"\[([^\]:]*)(?::([^\]]*))?\]")
_OFFSET = re.compile(r"\boffset(\s+)(-?)([\w.]+)")


def _scaled(duration: str, factor: int) -> str:
    """``duration`` ``factor`` times shorter, in seconds; an error for what it cannot scale exactly."""
    match = _DURATION.fullmatch(duration.strip())
    if match is None:
        raise ValueError(
            f"cannot scale the duration {duration!r}: one number and one unit of {sorted(_UNIT_S)} only"
            " (no ms, no compound such as 1h30m, no empty subquery step)"
        )
    seconds = int(match[1]) * _UNIT_S[match[2]]
    if seconds % factor:
        raise ValueError(f"the duration {duration!r} is not a whole number of seconds {factor} times shorter")
    return f"{seconds // factor}s"


def _expr_lines(block: str) -> tuple[int, int]:
    """Where ``expr:`` and its value (the lines indented under it) start and end in one alert's ``block``."""
    found = re.search(r"^( *)expr:.*\n(?:(?:\1 .*)?\n)*", block, re.M)
    if found is None:
        raise ValueError(f"no expr in {block[:80]!r}")
    return found.start(), found.end()


def scaled_durations(alert: str, factor: int) -> Callable[[str], str]:
    """The rules with every duration in ``alert``'s expression (each range window, subquery step and ``offset``)
    ``factor`` times shorter, the rest as it was: an alert that compares the last half hour with the day before can
    be seen to fire and end in minutes, on the same expression. Unlike ``short_rules``, which sets all windows to one
    length, the windows keep their ratios; a duration it cannot scale exactly is an error, never left as it was."""

    def rules(text: str) -> str:
        start = text.find(f"- alert: {alert}\n")
        if start < 0:
            raise ValueError(f"no alert {alert} in the rules")
        end = text.find("- alert: ", start + 1)
        end = len(text) if end < 0 else end
        first, last = _expr_lines(text[start:end])
        expr = text[start + first : start + last]
        ranged = _RANGE.sub(
            lambda m: f"[{_scaled(m[1], factor)}" + ("" if m[2] is None else f":{_scaled(m[2], factor)}") + "]", expr
        )
        body = _OFFSET.sub(lambda m: f"offset{m[1]}{m[2]}{_scaled(m[3], factor)}", ranged)
        if body == expr:
            raise ValueError(f"{alert}'s expression has no duration to scale")
        return text[: start + first] + body + text[start + last :]

    return rules


def promtool_check(text: str) -> None:
    """``promtool check metrics`` accepts ``text`` (an endpoint's exposition)."""
    done = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr + text[:3000]


def consecutive_free_ports(count: int) -> int:
    """The first of ``count`` consecutive free loopback ports."""
    for _ in range(100):
        first = free_port()
        try:
            for port in range(first + 1, first + count):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        return first
    raise AssertionError("no run of free ports")


def prometheus_config(directory: Path, scrape_interval_s: int = 1, window_s: int | None = 20) -> Path:
    """deploy/prometheus/prometheus.yml with test intervals and short-duration rules, in ``directory``
    (``window_s``: as ``short_rules``; None keeps the deployed expressions whole)."""
    directory.mkdir(parents=True, exist_ok=True)
    config = (DEPLOY / "prometheus" / "prometheus.yml").read_text()
    config = re.sub(r"(scrape|evaluation)_interval: \d+s", rf"\1_interval: {scrape_interval_s}s", config)
    (directory / "prometheus.yml").write_text(config)
    (directory / "icecrawler-rules.yml").write_text(
        short_rules((DEPLOY / "prometheus" / "icecrawler-rules.yml").read_text(), window_s=window_s)
    )
    return directory / "prometheus.yml"


class Prometheus:
    """One Prometheus server under ``group`` (stopped with it)."""

    def __init__(self, group: ProcessGroup, config: Path, data_dir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: ManagedProcess = group.start(
            "prometheus",
            [
                prometheus_binary(),
                f"--config.file={config}",
                f"--storage.tsdb.path={data_dir}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
        )
        deadline = time.monotonic() + 60
        while not self._ready():
            if time.monotonic() > deadline or not self.process.alive():
                pytest.fail(f"prometheus did not become ready:\n{self.process.log_tail()}")
            time.sleep(0.2)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as answer:
            body = json.loads(answer.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        return list(data["result"])

    def value(self, expr: str) -> float | None:
        """The single value of an expression that yields one series (None when it yields none)."""
        result = self.query(expr)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def alert_states(self) -> dict[str, set[str]]:
        states: dict[str, set[str]] = {}
        for alert in self.api("alerts")["alerts"]:
            states.setdefault(alert["labels"]["alertname"], set()).add(alert["state"])
        return states

    def healthy_targets(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for target in self.api("targets")["activeTargets"]:
            if target["health"] == "up":
                counts[target["labels"]["job"]] = counts.get(target["labels"]["job"], 0) + 1
        return counts


def static_targets(directory: Path, role: str, ports: list[int]) -> None:
    """The file-based discovery list ``targets/<role>.json`` that ``prometheus_config``'s config reads, naming
    these loopback ports (what ``icecrawler targets`` writes, without probing)."""
    (directory / "targets").mkdir(parents=True, exist_ok=True)
    targets = [{"targets": [f"127.0.0.1:{port}" for port in ports]}]
    (directory / "targets" / f"{role}.json").write_text(json.dumps(targets))

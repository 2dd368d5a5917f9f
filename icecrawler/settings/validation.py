"""Range checks for every setting, run once the layers are merged, and path checks run by the daemons that use them.

Why: a value of the right type can still be nonsense that only shows up later, far from its cause
(``scheduler.lease_s=nan`` failed every lease with UnknownException; ``maintenance_interval_s=0`` spun a core;
``storage.batch_limit=0`` refused every write). Every float must be finite; the table below adds the bounds.
A key without a rule (e.g. one added by another component) still gets the finite check, and every ``*_url`` setting
(a source's ``base_url`` or ``visitor_url``, ``client.proxy_url``) must be empty or an http(s) URL with a host.
"""

from __future__ import annotations

import math
import os
import tempfile
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from icecrawler.errors import ConfigError

__all__ = ["RULES", "Bound", "check_file_path", "check_paths", "check_writable_dir", "validate_values"]


@dataclass(frozen=True)
class Bound:
    """``low <= value`` (or ``low < value`` when ``strict``) and ``value <= high``; ``choices`` for text."""

    low: float | None = None
    high: float | None = None
    strict: bool = False
    choices: tuple[str, ...] = ()

    def problem(self, value: Any) -> str | None:
        if self.choices:
            return None if str(value) in self.choices else f"must be one of {', '.join(self.choices)}"
        if self.low is not None and (value <= self.low if self.strict else value < self.low):
            return f"must be {'>' if self.strict else '>='} {_num(self.low)}"
        if self.high is not None and value > self.high:
            return f"must be <= {_num(self.high)}"
        return None


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


POSITIVE = Bound(0, strict=True)
NON_NEGATIVE = Bound(0)
AT_LEAST_ONE = Bound(1)
PORT = Bound(1, 65535)

RULES: dict[str, Bound] = {
    "client.workers": AT_LEAST_ONE,
    "client.batch": AT_LEAST_ONE,
    "client.max_pages": AT_LEAST_ONE,
    "client.timeout_s": POSITIVE,
    "client.retries": NON_NEGATIVE,
    "client.backoff_s": NON_NEGATIVE,
    "client.max_body_bytes": AT_LEAST_ONE,
    "client.idle_sleep_s": NON_NEGATIVE,
    "client.buffer_records": AT_LEAST_ONE,
    "client.max_backoff_s": NON_NEGATIVE,
    "client.progress_log_s": POSITIVE,
    "client.report_batch": AT_LEAST_ONE,
    "client.shutdown_grace_s": NON_NEGATIVE,
    "client.total_timeout_s": POSITIVE,
    "clock.origin": NON_NEGATIVE,
    "clock.speed": POSITIVE,
    "hbase.heap_mb": AT_LEAST_ONE,
    "hbase.master_port": PORT,
    "hbase.regionserver_port": PORT,
    "hbase.start_timeout_s": POSITIVE,
    "hbase.thrift_port": PORT,
    "hbase.zookeeper_port": PORT,
    "log.level": Bound(
        choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL", "debug", "info", "warning", "error", "critical")
    ),
    "sandbox.latency_ms": NON_NEGATIVE,
    "sandbox.max_hang_s": NON_NEGATIVE,
    "sandbox.port": Bound(0, 65535),
    "sandbox.visitor_ttl_s": POSITIVE,
    "scheduler.account_budget_per_min": AT_LEAST_ONE,
    "scheduler.account_freeze_s": NON_NEGATIVE,
    "scheduler.backoff_after_attempts": AT_LEAST_ONE,
    "scheduler.batch_limit": AT_LEAST_ONE,
    "scheduler.backup_interval_s": AT_LEAST_ONE,  # backups are named to the second
    "scheduler.backup_keep": AT_LEAST_ONE,
    "scheduler.checkpoint_interval_s": POSITIVE,
    "scheduler.done_retention_s": NON_NEGATIVE,
    "scheduler.history_len": AT_LEAST_ONE,
    "scheduler.host_block_s": NON_NEGATIVE,
    "scheduler.record_cache": NON_NEGATIVE,
    "scheduler.host_spacing_s": NON_NEGATIVE,
    "scheduler.shards": AT_LEAST_ONE,
    "scheduler.shard": NON_NEGATIVE,
    "scheduler.lease_s": POSITIVE,
    "scheduler.maintenance_interval_s": POSITIVE,
    "scheduler.max_period_s": POSITIVE,
    "scheduler.min_period_s": POSITIVE,
    "scheduler.initial_period_s": POSITIVE,
    "scheduler.fetch_budget_per_s": NON_NEGATIVE,
    "scheduler.rate_reference_period_s": POSITIVE,
    "scheduler.visitor_renew_s": NON_NEGATIVE,
    "storage.backend": Bound(choices=("embedded", "hbase")),
    "storage.backup_interval_s": AT_LEAST_ONE,  # backups are named to the second
    "storage.backup_keep": AT_LEAST_ONE,
    "storage.batch_limit": AT_LEAST_ONE,
    "storage.hbase.port": PORT,
    "storage.hbase.pool_size": AT_LEAST_ONE,
    "storage.hbase.timeout_s": POSITIVE,
    "storage.max_text_chars": AT_LEAST_ONE,
    "storage.write_timeout_s": POSITIVE,
}


def validate_values(
    values: Mapping[str, Any], rules: Mapping[str, Bound] = RULES, origins: Mapping[str, str] | None = None
) -> None:
    """Raise ConfigError naming the first setting whose value is out of range (or not finite), and where that value
    came from when ``origins`` says (a file, an environment variable, ``--set``): the one to fix."""
    for key, value in values.items():
        problem = None
        if isinstance(value, float) and not math.isfinite(value):
            problem = "must be a finite number"
        rule = rules.get(key)
        checked = rule is not None and not isinstance(value, bool) and (rule.choices or isinstance(value, (int, float)))
        if problem is None and rule is not None and checked:
            problem = rule.problem(value)
        if problem is None and key.endswith("_url") and isinstance(value, str):
            problem = _url_problem(value)
        if problem is not None:
            origin = f" (from {origins[key]})" if origins and key in origins else ""
            shown = _without_user(value) if isinstance(value, str) else value  # a proxy's password
            raise ConfigError(f"setting {key}={shown!r}: {problem}{origin}")


def _without_user(value: str) -> str:
    """``value`` with everything before its last ``@`` hidden (after the ``//``, if any): the user and password of a
    URL (``http://user:pw@proxy:3128``), never shown in an error. A password may hold an unescaped ``/``, ``#``, ``?``
    or ``@``, so the parser's idea of where it ends is no guide."""
    if "@" not in value:
        return value
    head, _, host = value.rpartition("@")
    scheme, slashes, _ = head.partition("//")
    return f"{scheme}{slashes}…@{host}" if slashes else f"…@{host}"


def _url_problem(value: str) -> str | None:
    """What is wrong with the value of a ``*_url`` setting (a site's ``base_url``, a ``visitor_url``, the client's
    ``proxy_url``): each is an http(s) URL with a host, or empty. Otherwise a host Python's parser refuses
    (``https://[weibo.com``) was a ValueError traceback wherever the URL was first read, and one without a scheme
    (``weibo.com``) failed every crawl of the source as an invalid URL."""
    if not value:
        return None
    try:
        parts = urllib.parse.urlsplit(value)
        _ = parts.port  # a port that is no number, or past 65535, raises here
    except ValueError as exc:  # its words may quote a password the parser took for a host or port: not shown then
        return "is not a URL" if "@" in value else f"is not a URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http:// or https:// URL with a host"
    return None


def _existing_ancestor(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(".")


def check_writable_dir(key: str, value: str) -> Path:
    """``value`` is (or can be created as) a directory this process may write in (probed with a temporary file)."""
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"setting {key}={value!r}: not a directory")
    base = _existing_ancestor(path)
    if not base.is_dir():
        raise ConfigError(f"setting {key}={value!r}: {base} is not a directory")
    try:  # a real write: os.access says yes to root even where nobody can write (/proc, a read-only mount)
        with tempfile.TemporaryFile(dir=base):
            pass
    except OSError as exc:
        raise ConfigError(f"setting {key}={value!r}: cannot write in {base} ({exc.strerror or exc})") from exc
    return path


def check_file_path(key: str, value: str) -> Path:
    """``value`` names a file (not a directory) whose directory is writable (or can be created)."""
    path = Path(value)
    if not value or path.is_dir():
        raise ConfigError(f"setting {key}={value!r}: not a file path")
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise ConfigError(f"setting {key}={value!r}: not readable and writable")
    check_writable_dir(key, str(path.parent))
    return path


def check_paths(settings: Mapping[str, Any], dirs: Iterable[str] = (), files: Iterable[str] = ()) -> None:
    """A daemon's start-up check of the directories and files it will write."""
    for key in dirs:
        check_writable_dir(key, str(settings[key]))
    for key in files:
        check_file_path(key, str(settings[key]))

"""The alert rules and the Prometheus example config pass promtool: syntax, and the rules' unit tests
(deploy/prometheus/icecrawler-rules.test.yml: each alert fires on a made-up history and stays quiet on a
healthy one), and every series the rules, their unit tests and the Grafana dashboard read is one the real daemons
export."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from icecrawler_local.stack import running_stack
from tests.observability.prom import DEPLOY, promtool, scrape, short_rules


def _promtool(*args: str, cwd: Path = DEPLOY / "prometheus") -> str:
    done = subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=120, cwd=cwd)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


#: An alert as the rules declare it, as their unit tests name it, and as docs/DEPLOY.md's table of alerts lists it.
RULE_ALERT = re.compile(r"^\s*- alert: (\w+)", re.M)
TESTED_ALERT = re.compile(r"^\s*(?:- )?alertname: (\w+)", re.M)
DOC_ALERT = re.compile(r"^\| `(Icecrawler\w+)` \|", re.M)


def rule_alerts() -> list[str]:
    return RULE_ALERT.findall((DEPLOY / "prometheus" / "icecrawler-rules.yml").read_text(encoding="utf-8"))


def test_rules_are_valid() -> None:
    assert f"SUCCESS: {len(rule_alerts())} rules found" in _promtool("check", "rules", "icecrawler-rules.yml")


def test_every_alert_has_a_unit_test_a_row_in_the_docs_and_no_twin() -> None:
    """An alert added to the rules is unit-tested (icecrawler-rules.test.yml) and listed in docs/DEPLOY.md's table
    ("Metrics and alerts") in the same change, and the dashboard names only alerts that exist."""
    alerts = rule_alerts()
    assert len(alerts) >= 10 and len(set(alerts)) == len(alerts), alerts
    tested = set(
        TESTED_ALERT.findall((DEPLOY / "prometheus" / "icecrawler-rules.test.yml").read_text(encoding="utf-8"))
    )
    assert sorted(set(alerts) - tested) == [], "alerts without a case in icecrawler-rules.test.yml"
    assert sorted(tested - set(alerts)) == [], "icecrawler-rules.test.yml tests alerts the rules do not have"
    documented = DOC_ALERT.findall((DEPLOY.parent / "docs" / "DEPLOY.md").read_text(encoding="utf-8"))
    assert sorted(set(alerts) ^ set(documented)) == [], "docs/DEPLOY.md's table of alerts differs from the rules"
    named = set(
        re.findall(r"\bIcecrawler[A-Z]\w*", (DEPLOY / "grafana" / "icecrawler.json").read_text(encoding="utf-8"))
    )
    assert sorted(named - set(alerts)) == [], "the dashboard names alerts the rules do not have"


def test_rules_unit_tests_pass() -> None:
    assert "SUCCESS" in _promtool("test", "rules", "icecrawler-rules.test.yml")


def test_example_config_is_valid() -> None:
    assert "SUCCESS" in _promtool("check", "config", "--syntax-only", "prometheus.yml")


def test_short_rules_keep_every_alert_and_stay_valid(tmp_path: Path) -> None:
    text = (DEPLOY / "prometheus" / "icecrawler-rules.yml").read_text()
    short = short_rules(text)
    assert short.count("alert:") == text.count("alert:") == len(rule_alerts())
    assert "for: 2s" in short and "[20s]" in short and "for: 10m" not in short
    (tmp_path / "rules.yml").write_text(short)
    assert "SUCCESS" in _promtool("check", "rules", "rules.yml", cwd=tmp_path)


def test_a_broken_rule_is_caught(tmp_path: Path) -> None:
    (tmp_path / "rules.yml").write_text("groups:\n  - name: x\n    rules:\n      - alert: Bad\n        expr: sum(\n")
    done = subprocess.run(
        [promtool(), "check", "rules", "rules.yml"], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode != 0
    assert "FAILED" in done.stdout + done.stderr


#: A metric name in a rule, a panel or a made-up history; ``icecrawler_(scheduler|storage)_x`` (a panel's
#: ``__name__`` regex) is read as both names.
SERIES_NAME = re.compile(r"\b(?:icecrawler_(?:\(([a-z|]+)\)|[a-z]+)_[a-z0-9_]*[a-z0-9]|process_[a-z_]+[a-z])\b")


def series_names(text: str) -> set[str]:
    """Every metric name ``text`` reads, without a histogram's ``_bucket``/``_count``/``_sum``."""
    names = set()
    for match in SERIES_NAME.finditer(text):
        whole, roles = match.group(0), match.group(1)
        for name in [whole.replace(f"({roles})", role) for role in roles.split("|")] if roles else [whole]:
            names.add(re.sub(r"_(bucket|count|sum)$", "", name))
    return names


def exported_names(url: str) -> set[str]:
    """The metric families an endpoint declares (``# TYPE`` lines: a family is declared before its first sample)."""
    text = scrape(url)
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}


def test_series_names_reads_plain_names_and_role_alternatives() -> None:
    text = 'rate(icecrawler_client_fetch_duration_seconds_bucket[5m]) {__name__=~"icecrawler_(scheduler|storage)_x_y"}'
    assert series_names(text + " process_open_fds") == {
        "icecrawler_client_fetch_duration_seconds",
        "icecrawler_scheduler_x_y",
        "icecrawler_storage_x_y",
        "process_open_fds",
    }


@pytest.mark.ice
@pytest.mark.bdb
@pytest.mark.slow
def test_every_series_the_rules_the_dashboard_and_the_rule_tests_read_is_exported(tmp_path: Path) -> None:
    """An alert on a metric no daemon exports never fires, a panel on one stays empty, and a rule's unit test on a
    made-up series proves nothing: every name they read is one the real daemons declare (backups on, so that the
    backup series are there)."""
    backups = {"backup_dir": str(tmp_path / "backups")}
    with running_stack(
        tmp_path / "stack",
        speed=60,
        scheduler_settings={f"scheduler.{key}": value for key, value in backups.items()},
        storage_settings={f"storage.{key}": value for key, value in backups.items()},
    ) as stack:
        stack.start_client("client", {})
        stack.wait_metrics(60)
        exported = set().union(*(exported_names(url) for url in stack.metrics_urls().values()))
    assert {"icecrawler_scheduler_tasks", "icecrawler_storage_backup_age_seconds", "process_open_fds"} <= exported
    for path in ("prometheus/icecrawler-rules.yml", "prometheus/icecrawler-rules.test.yml", "grafana/icecrawler.json"):
        read = series_names((DEPLOY / path).read_text(encoding="utf-8"))
        assert read, path
        assert sorted(read - exported) == [], f"{path} reads series no daemon exports"

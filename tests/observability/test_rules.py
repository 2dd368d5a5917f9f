"""The alert rules and the Prometheus example config pass promtool: syntax, and the rules' unit tests
(deploy/prometheus/icecrawler-rules.test.yml: each alert fires on a made-up history and stays quiet on a
healthy one)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.observability.prom import DEPLOY, promtool, short_rules


def _promtool(*args: str, cwd: Path = DEPLOY / "prometheus") -> str:
    done = subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=120, cwd=cwd)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_rules_are_valid() -> None:
    assert "SUCCESS: 16 rules found" in _promtool("check", "rules", "icecrawler-rules.yml")


def test_rules_unit_tests_pass() -> None:
    assert "SUCCESS" in _promtool("test", "rules", "icecrawler-rules.test.yml")


def test_example_config_is_valid() -> None:
    assert "SUCCESS" in _promtool("check", "config", "--syntax-only", "prometheus.yml")


def test_short_rules_keep_every_alert_and_stay_valid(tmp_path: Path) -> None:
    text = (DEPLOY / "prometheus" / "icecrawler-rules.yml").read_text()
    short = short_rules(text)
    assert short.count("alert:") == text.count("alert:") == 16
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

"""Benchmarks: one module per ``icecrawler bench NAME``, each with ``main(argv) -> int``. What several share is here:
the table head and the figures file (``docs/bench/NAME.json``: flat keys, units in their names)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from icecrawler import durable

__all__ = ["ROOT", "table_head", "write_figures"]

ROOT = Path(__file__).resolve().parents[1]


def table_head(command: str, caption: str, columns: Sequence[str]) -> list[str]:
    """The first lines of a benchmark's table: the exact command and what it measured, then a Markdown header whose
    first column is text and the others numbers."""
    return [
        f"Command: `{command.strip()}`; {caption}",
        "",
        "| " + " | ".join(columns) + " |",
        "|---|" + "---:|" * (len(columns) - 1),
    ]


def write_figures(where: str | Path, figures: Mapping[str, Any]) -> Path:
    """Write the figures file, ``docs/bench/NAME.json`` for a name or the path given, and say so. Keys sorted, so
    that two runs' files compare line by line; written whole (``durable.write_whole``), so a run stopped while
    writing leaves the last run's file, never half of one."""
    path = where if isinstance(where, Path) else ROOT / "docs" / "bench" / f"{where}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(dict(figures), indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    durable.write_whole(path, text.encode("utf-8"))
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return path

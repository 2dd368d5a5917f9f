"""Benchmarks: one module per ``icecrawler bench NAME``, each with ``main(argv) -> int``. What several share is here:
the table head and the figures file (``docs/bench/NAME.json``: flat keys, units in their names)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

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


def write_figures(name: str, figures: Mapping[str, float]) -> Path:
    """Write ``docs/bench/NAME.json`` and say so."""
    path = ROOT / "docs" / "bench" / f"{name}.json"
    path.write_text(json.dumps(dict(figures), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {path.relative_to(ROOT)}")
    return path

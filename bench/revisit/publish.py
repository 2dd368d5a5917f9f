"""Writing benchmark results into the docs: a generated block of docs/REVISIT.md and the flat headline keys of
docs/bench/revisit.json, each run replacing only its own part (the synthetic run and the real-trace run share
both files)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from bench import write_figures
from icecrawler import durable

__all__ = ["code_span", "fmt", "merge_json", "table", "write_block"]


def write_block(path: Path, block: str, name: str = "revisit-results") -> None:
    """Replace the text between ``<!-- name:start -->`` and ``<!-- name:end -->`` in ``path`` (or append both)."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = path.read_text(encoding="utf-8") if path.exists() else "# Revisit benchmark\n\n"
    if start in text and end in text:
        text = text[: text.index(start)] + start + "\n" + block + "\n" + text[text.index(end) :]
    else:
        text += f"\n{start}\n{block}\n{end}\n"
    durable.write_whole(path, text.encode("utf-8"))  # a run killed midway never leaves half of the document


def merge_json(path: Path, head: dict[str, float], owns: Callable[[str], bool]) -> None:
    """Write ``head`` into the JSON object at ``path``, first dropping the keys this run owns (``owns(key)``)."""
    old = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    write_figures(path, {k: v for k, v in old.items() if not owns(k)} | head)


def fmt(mean: float, hw: float, digits: int = 2) -> str:
    """``mean ± half-width`` (just the mean when the half-width is NaN, e.g. one seed)."""
    return f"{mean:.{digits}f}" if hw != hw else f"{mean:.{digits}f} ± {hw:.{digits}f}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table. A ``|`` in a cell (a source named ``jd|reviews`` in a trace file) is escaped, so that it
    does not split the row."""

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    return "\n".join([line(header), "|" + "|".join("---" for _ in header) + "|", *(line(r) for r in rows)])


def code_span(text: str) -> str:
    """``text`` as inline code, fenced by more backticks than it holds in a row (a target id may hold some)."""
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"

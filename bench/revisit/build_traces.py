"""Rebuild ``bench/revisit/data/real.jsonl`` (real publication times, one target per line) from local git copies
of public repositories: ``python -m bench.revisit.build_traces GITDIR... [--out FILE]``.

Two kinds of source (docs/REVISIT.md, "Real traces"):

* ``weibo``: a repository holding a crawler's saved Weibo posts as .xlsx sheets with a ``user_id`` column (A) and a
  ``post_id`` column (B). A post id (mid) carries its publication time: unix seconds = (mid >> 22) + 515483463; the
  builder checks that against the sheet's own publication time (column D, Beijing time, an Excel day number) and
  reports how many rows agree within 2 s. Target = one user.
* ``git``: any other repository: its commit feed. Items are the commit (committer) times of non-merge commits on
  HEAD, i.e. when a change landed on the branch; targets = one feed per author and one per top-level directory pair
  (``crates/foo``), as a forge's per-author and per-path commit feeds list them.

A target is kept when some 28-day window (``--window-days``) holds at least 30 of its items (``--min-items``) spread
over at least 14 days (``--min-spread-days``); only the times inside its densest such window are written. Nothing
but the times, a source label and an opaque id (a truncated SHA-256 of the repository and the raw id) leaves the
builder: no names, no text, no e-mail addresses.
Reading .xlsx needs only the standard library (it is a zip of XML).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator, Sequence
from io import BytesIO
from pathlib import Path
from xml.etree import ElementTree

from icecrawler import durable

DAY = 86400
#: Window, fewest items and least spread of a kept target.
WINDOW_S = 28 * DAY
MIN_ITEMS = 30
MIN_SPREAD_S = 14 * DAY
#: Weibo mid -> unix seconds: the top bits of the id are a timestamp (seconds) with this offset.
WEIBO_MID_SHIFT = 22
WEIBO_MID_OFFSET_S = 515483463
#: Excel day 0 is 1899-12-30; unix day 0 is Excel day 25569. The sheet's times are Beijing time (UTC+8).
EXCEL_UNIX_DAY = 25569
BEIJING_OFFSET_S = 8 * 3600
_NS = {"m": "http://schemas.openxmlformats.org/spreadsheetml/2006/main"}
_WEIBO_SHEETS = re.compile(r"(^|/)posting_history[^/]*\.xlsx$")


def weibo_mid_time(mid: int) -> int:
    """Publication time (unix seconds) encoded in a Weibo post id."""
    return (mid >> WEIBO_MID_SHIFT) + WEIBO_MID_OFFSET_S


def _git(gitdir: Path, *args: str) -> bytes:
    return subprocess.run(["git", f"--git-dir={gitdir}", *args], check=True, capture_output=True).stdout


def _xlsx_rows(data: bytes) -> Iterator[dict[str, str]]:
    """Numeric cells of the first sheet, row by row, keyed by column letter (shared strings are skipped)."""
    with zipfile.ZipFile(BytesIO(data)) as book:
        root = ElementTree.fromstring(book.read("xl/worksheets/sheet1.xml"))
    data_el = root.find("m:sheetData", _NS)
    for row in data_el if data_el is not None else []:
        out: dict[str, str] = {}
        for cell in row:
            match = re.match(r"[A-Z]+", cell.get("r", ""))
            value = cell.find("m:v", _NS)
            if match and value is not None and value.text is not None and cell.get("t") != "s":
                out[match.group()] = value.text
        yield out


def weibo_items(gitdir: Path, commit: str, paths: Sequence[str]) -> tuple[dict[str, list[int]], dict[str, int]]:
    """User id -> post times from the sheets, and the mid-versus-sheet time check counts."""
    users: dict[str, set[int]] = collections.defaultdict(set)
    check = {"rows": 0, "agree_2s": 0}
    for path in paths:
        for row in _xlsx_rows(_git(gitdir, "show", f"{commit}:{path}")):
            if not ("A" in row and "B" in row and row["B"].isdigit()):
                continue
            t = weibo_mid_time(int(row["B"]))
            users[row["A"]].add(t)
            if "D" in row:
                check["rows"] += 1
                sheet = round((float(row["D"]) - EXCEL_UNIX_DAY) * DAY) - BEIJING_OFFSET_S
                check["agree_2s"] += abs(sheet - t) <= 2
    return {u: sorted(ts) for u, ts in users.items()}, check


def git_items(gitdir: Path, commit: str) -> dict[str, list[int]]:
    """Feed key ("author:<email>" / "path:<a/b>") -> commit times (non-merge commits reachable from ``commit``)."""
    out = _git(gitdir, "log", "--no-merges", "--no-renames", "--format=@%ct %ae", "--name-only", commit).decode(
        "utf-8", "replace"
    )
    feeds: dict[str, set[int]] = collections.defaultdict(set)
    stamp = None
    for line in out.splitlines():
        if line.startswith("@"):
            when, email = line[1:].split(" ", 1)
            stamp = int(when)
            feeds[f"author:{email}"].add(stamp)
        elif line.strip() and stamp is not None:
            parts = line.split("/")
            if len(parts) >= 3:
                feeds[f"path:{parts[0]}/{parts[1]}"].add(stamp)
    return {k: sorted(v) for k, v in feeds.items()}


def densest_window(
    times: Sequence[int], window_s: int = WINDOW_S, min_items: int = MIN_ITEMS, min_spread_s: int = MIN_SPREAD_S
) -> list[int] | None:
    """The times in the ``window_s`` window (starting at an item) holding most items, earliest first among ties, if
    it has ``min_items`` items spread over ``min_spread_s``; else None."""
    best, best_i, j = 0, 0, 0
    for i in range(len(times)):
        while times[j] < times[i] - window_s + 1:
            j += 1
        if i - j + 1 > best:
            best, best_i = i - j + 1, j
    start = times[best_i] if times else 0
    window = [t for t in times if start <= t < start + window_s]
    if len(window) < min_items or window[-1] - window[0] < min_spread_s:
        return None
    return window


def opaque_id(repo: str, key: str) -> str:
    return hashlib.sha256(f"{repo}\n{key}".encode()).hexdigest()[:16]


def _repo_name(gitdir: Path) -> str:
    """owner/name from a mirror path like .../owner+name/repo (or the folder name)."""
    folder = gitdir.parent.name if gitdir.name == "repo" else gitdir.name
    return folder.replace("+", "/", 1)


def build(
    gitdirs: Sequence[Path], window_s: int = WINDOW_S, min_items: int = MIN_ITEMS, min_spread_s: int = MIN_SPREAD_S
) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """All kept targets (sorted by source, id), each its densest ``window_s`` of items if that holds ``min_items``
    spread over ``min_spread_s``, and one provenance record per repository."""
    records: list[dict[str, object]] = []
    provenance: list[dict[str, object]] = []
    for gitdir in gitdirs:
        repo = _repo_name(gitdir)
        commit = _git(gitdir, "rev-parse", "HEAD").decode().strip()
        files = _git(gitdir, "ls-tree", "-r", "--name-only", commit).decode().splitlines()
        sheets = sorted(f for f in files if _WEIBO_SHEETS.search(f))
        if sheets:
            feeds, check = weibo_items(gitdir, commit, sheets)
            kinds = {"weibo": {f"user:{u}": ts for u, ts in feeds.items()}}
            info: dict[str, object] = {"paths": sheets, "mid_time_check": check}
        else:
            feeds = git_items(gitdir, commit)
            kinds = {
                "git-author": {k: v for k, v in feeds.items() if k.startswith("author:")},
                "git-path": {k: v for k, v in feeds.items() if k.startswith("path:")},
            }
            info = {"paths": ["(commit history of HEAD)"]}
        kept: collections.Counter[str] = collections.Counter()
        for source, by_key in kinds.items():
            for key, times in by_key.items():
                window = densest_window(times, window_s, min_items, min_spread_s)
                if window is not None:
                    records.append({"target": opaque_id(repo, key), "source": source, "times": window})
                    kept[source] += 1
        provenance.append({"repo": repo, "commit": commit, **info, "targets": dict(kept)})
    records.sort(key=lambda r: (str(r["source"]), str(r["target"])))
    return records, provenance


def _whole_number(unit: str, least: int) -> Callable[[str], int]:
    """An argparse type for a whole number of ``unit`` of at least ``least``: a bad value exits 2 with the reason."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number of {unit}: {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"{value} {unit}: give at least {least}")
        return value

    return parse


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.revisit.build_traces", description=__doc__.split("\n\n")[0])
    parser.add_argument("gitdirs", nargs="+", type=Path, help="git directories of the fetched repositories")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "data" / "real.jsonl")
    parser.add_argument(
        "--window-days",
        type=_whole_number("days", 1),
        default=WINDOW_S // DAY,
        help="keep each target's densest window of this many days (default: %(default)s; longer windows make the "
        "long, sparse traces a review or feed archive gives)",
    )
    parser.add_argument(
        "--min-items",
        type=_whole_number("items", 2),  # two items are the fewest that have a spread
        default=MIN_ITEMS,
        help="keep a target only if its window holds this many items (default: %(default)s)",
    )
    parser.add_argument(
        "--min-spread-days",
        type=_whole_number("days", 1),
        default=MIN_SPREAD_S // DAY,
        help="... spread over at least this many days from first to last (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    if args.window_days < args.min_spread_days:
        parser.error(
            f"--window-days: {args.window_days} days is shorter than a kept target's least spread "
            f"({args.min_spread_days} days)"
        )
    records, provenance = build(args.gitdirs, args.window_days * DAY, args.min_items, args.min_spread_days * DAY)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # Whole files: a run killed midway leaves the last traces, never a file cut at a line that reads as fewer targets.
    durable.write_whole(args.out, "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records).encode())
    durable.write_whole(
        args.out.with_name(args.out.stem + ".provenance.json"), (json.dumps(provenance, indent=1) + "\n").encode()
    )
    print(f"{len(records)} targets -> {args.out}", file=sys.stderr)
    for p in provenance:
        print(f"  {p['repo']}@{str(p['commit'])[:10]}: {p['targets']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

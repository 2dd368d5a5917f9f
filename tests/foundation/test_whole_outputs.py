"""Result files that people and other programs read (the demo's summary and figure, the benchmarks' documents) are
only ever whole: a run killed with ``kill -9`` while it writes one leaves the last run's file as it was, and the next
run replaces it. A real process is killed half way through its write (``tests.helpers.DIE_MID_WRITE``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.revisit.publish import write_block
from icecrawler_local.demo import DemoResult, PeriodTracker, SourceSummary, write_summary
from tests.helpers import DIE_MID_WRITE, killed_midway

REPO = Path(__file__).resolve().parents[2]

#: Each case: the file's name, the code that writes it (``out`` is its path, in the child and here alike).
WRITERS = {
    "summary.json": """
from icecrawler_local.demo import DemoResult, SourceSummary, write_summary
write_summary(out, DemoResult({"jd": SourceSummary("jd", published=7, stored=7)}))
""",
    "periods.png": """
from icecrawler_local.demo import PeriodTracker
tracker = PeriodTracker({"user:weibo_mobile:1": 600.0}, 60.0)
tracker.points = {"user:weibo_mobile:1": {0: 60.0, 600_000: 120.0}}
tracker.plot(out, 0.0)
""",
    "REVISIT.md": """
from bench.revisit.publish import write_block
write_block(out, "| policy | lag |\\n|---|---:|\\n| rate | 1.0 |")
""",
}


def _old_file(path: Path) -> bytes:
    """The last run's whole file, as each writer leaves it."""
    if path.name == "summary.json":
        write_summary(path, DemoResult({"jd": SourceSummary("jd", published=3, stored=3)}))
    elif path.name == "periods.png":
        tracker = PeriodTracker({"user:weibo_mobile:1": 600.0}, 60.0)
        tracker.points = {"user:weibo_mobile:1": {0: 60.0}}
        tracker.plot(path, 0.0)
    else:
        path.write_text("# Revisit benchmark\n\nHand-written text that must survive.\n" * 50, encoding="utf-8")
        write_block(path, "| policy | lag |\n|---|---:|\n| rate | 2.0 |")
    return path.read_bytes()


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_run_killed_while_writing_a_result_leaves_the_last_one_whole(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    old = _old_file(path)
    script = DIE_MID_WRITE + f"from pathlib import Path\nout = Path({str(path)!r})\n" + WRITERS[name]
    killed_midway(script, str(REPO), name)
    assert path.read_bytes() == old
    exec(compile(f"from pathlib import Path\nout = Path({str(path)!r})\n" + WRITERS[name], name, "exec"), {})
    new = path.read_bytes()
    assert new != old
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # the killed run's .partial was replaced
    if name == "summary.json":
        assert json.loads(new)["jd"]["published"] == 7
    elif name == "periods.png":
        assert new.startswith(b"\x89PNG")
    else:
        assert new.decode().count("Hand-written text that must survive.") == 50 and "| rate | 1.0 |" in new.decode()

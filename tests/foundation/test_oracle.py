"""The one oracle: a truth item and the row storage keeps for it have the same identity, for every source."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from icecrawler.models import Post, Review
from icecrawler_local import oracle
from storage_server.schema import REVIEW, WEIBO, post_row, review_row
from storage_server.stores import SqliteStore

FETCHED = "2024-05-01T13:00:00+08:00"


def truth(source: str, target: str, item_id: str, created_at: str, text: str) -> dict[str, Any]:
    """A truth record as the sandbox writes it (Beijing time without an offset)."""
    return {
        "kind": "item",
        "source": source,
        "target": target,
        "id": item_id,
        "created_at": created_at,
        "text": text,
        "user": "someone",
        "published_ms": 0,
        "published_wall_ms": 0,
        "backlog": True,
    }


PUBLISHED = [
    # One post shown on two Weibo front ends: one row in storage.
    truth("weibo_pc", "1669879400", "4650000000000001", "2024-05-01 12:00:00", "今天天气不错"),
    truth("weibo_mobile", "1669879400", "4650000000000001", "2024-05-01 12:00:00", "今天天气不错"),
    truth("jd", "100012043978", "17230001", "2024-05-01 11:00:00", "物流很快"),
    # ECSHOP pages show no review ids: the sandbox knows none, the parser stores a digest.
    truth("ecshop", "42", "", "2024-05-01 10:30:00", "质量 很好"),
]


def store_rows(path: Path) -> None:
    """What the storage server writes for PUBLISHED (the ECSHOP text with the page's own whitespace)."""
    store = SqliteStore(str(path))
    try:
        store.put(
            WEIBO,
            [
                post_row(
                    Post(
                        id=4650000000000001,
                        user_id=1669879400,
                        text="今天天气不错",
                        created_at="2024-05-01T12:00:00+08:00",
                        fetched_at=FETCHED,
                        source="weibo_mobile",
                    )
                )
            ],
        )
        store.put(
            REVIEW,
            [
                review_row(
                    Review(
                        id="17230001",
                        product_id="100012043978",
                        source="jd",
                        content="物流很快",
                        created_at="2024-05-01T11:00:00+08:00",
                        fetched_at=FETCHED,
                    )
                ),
                review_row(
                    Review(
                        id="9f86d081884c7d659a2f",
                        product_id="42",
                        source="ecshop",
                        content="质量\n  很好 ",
                        created_at="2024-05-01T10:30:00+08:00",
                        fetched_at=FETCHED,
                    )
                ),
            ],
        )
    finally:
        store.close()


def test_truth_and_storage_agree_on_every_sources_identity(tmp_path: Path) -> None:
    db = tmp_path / "store.sqlite3"
    store_rows(db)
    stored = oracle.read_stored(db)
    assert oracle.problems(PUBLISHED, stored) == []
    assert set(oracle.stored_index(stored)) == {key for _, key in oracle.truth_index(PUBLISHED)}
    # The post is one identity whichever site showed it; the truth index keeps one entry per source.
    assert len(oracle.truth_index(PUBLISHED)) == 4 and len(stored) == 3


def test_the_truth_file_is_read_like_the_truth_endpoint(tmp_path: Path) -> None:
    path = tmp_path / "truth.jsonl"
    lines = [json.dumps(item, ensure_ascii=False) for item in PUBLISHED]
    lines.insert(1, json.dumps({"kind": "product", "source": "ecshop", "product": "42"}))
    path.write_text("\n".join(lines) + '\n{"kind": "item", "sour', encoding="utf-8")  # a line still being written
    assert oracle.read_truth_file(path) == PUBLISHED
    assert oracle.read_truth_file(tmp_path / "absent.jsonl") == []
    assert oracle.read_stored(tmp_path / "absent.sqlite3") == []


def test_problems_name_what_is_missing_extra_or_stored_twice() -> None:
    keys = [oracle.truth_key(item) for item in PUBLISHED]
    extra = ("jd", "100012043978", "999")
    stored = [oracle.StoredItem(key, 0) for key in (keys[0], keys[3], keys[3], extra)]
    found = oracle.problems(PUBLISHED, stored)
    assert found == [
        "review: 1 of 2 items never stored, e.g. [('jd', '100012043978', '17230001')]",
        "review: 1 stored items not in the truth, e.g. [('jd', '100012043978', '999')]",
        f"review: 1 items stored more than once, e.g. [({keys[3]!r}, 2)]",
    ]
    assert oracle.problems(PUBLISHED, [oracle.StoredItem(key, 0) for key in set(keys)]) == []


def test_the_demo_table_leaves_out_a_source_the_scenario_gives_nothing() -> None:
    from icecrawler_local.demo import DemoResult, SourceSummary, render_table

    result = DemoResult({"jd": SourceSummary("jd", published=3, stored=3, fetches=2), "toy": SourceSummary("toy")})
    rows = [line.split()[0] for line in render_table(result, 60).splitlines()[2:-1]]
    assert rows == ["jd"] and result.ok


def test_the_demo_says_when_stored_items_match_nothing_the_sandbox_published() -> None:
    """A new source whose parser keeps ids of its own (``"r17230001"`` for the page's ``17230001``) had every item
    stored and every item judged missing: the table said stored 0 and "FAILED: some published items were not
    stored", with nothing on why. The items that match no published item are now counted, and the table says what
    the judge matches by."""
    from icecrawler_local.demo import judge, render_table

    jd = oracle.truth_key(PUBLISHED[2])
    stored = [oracle.StoredItem(("jd", "100012043978", "r17230001"), 0), oracle.StoredItem(jd, 0)]
    result = judge(PUBLISHED, stored, cutoff_wall_ms=1)
    assert (result.sources["jd"].published, result.sources["jd"].stored, result.sources["jd"].unmatched) == (1, 1, 1)
    assert result.sources["jd"].after_cutoff == 0 and result.sources["jd"].duplicates == 0
    note = render_table(result, 60).splitlines()[-1]
    assert note.startswith("jd: 1 stored items match no item the sandbox published") and "Adding a source" in note
    clean = judge(PUBLISHED, [oracle.StoredItem(jd, 0)], cutoff_wall_ms=1)
    assert clean.sources["jd"].unmatched == 0 and "match no item" not in render_table(clean, 60)


def test_the_unmatched_note_names_what_the_judge_matches_a_source_by() -> None:
    """ECSHOP's pages show no review ids, so the judge knows its items by time and text: the note told a parser
    author of such a source to match ids, which would not help."""
    from icecrawler_local.demo import judge, render_table

    result = judge(PUBLISHED, [oracle.StoredItem(("ecshop", "42", 0, "another text"), 0)], cutoff_wall_ms=1)
    note = render_table(result, 60).splitlines()[-1]
    assert note.startswith("ecshop: 1 stored items match no item") and "time and text" in note and "its id" not in note


class _CrawlingStack:
    """A stack whose clients store one more item, just published, between any two reads (the demo's final
    summary runs while clients still crawl)."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = [dict(PUBLISHED[2])]
        self.rows: list[oracle.StoredItem] = [oracle.StoredItem(oracle.truth_key(PUBLISHED[2]), 0)]

    def _crawl(self) -> None:
        item = dict(PUBLISHED[2], id=str(17230100 + len(self.items)), published_wall_ms=10)
        self.items.append(item)
        self.rows.append(oracle.StoredItem(oracle.truth_key(item), 0))

    def truth(self) -> dict[str, Any]:
        items = list(self.items)
        self._crawl()
        return {"items": items}

    def stored(self) -> list[oracle.StoredItem]:
        rows = list(self.rows)
        self._crawl()
        return rows


def test_an_item_published_and_stored_between_the_summarys_reads_is_not_unmatched() -> None:
    """The summary read the truth first and the store second: an item published and stored in between was counted
    as matching nothing the sandbox published, with a note blaming the parser's ids."""
    from icecrawler_local.demo import summarize

    result = summarize(_CrawlingStack(), cutoff_wall_ms=5, with_fetches=False)  # type: ignore[arg-type]
    assert result.sources["jd"].unmatched == 0 and result.sources["jd"].stored == 1

"""Pure tests of validation, row keys and the spool encoding (no store, no Ice)."""

from __future__ import annotations

from typing import Any

import pytest

from icecrawler.errors import InvalidArgumentError
from icecrawler.models import Post
from storage_server import schema
from tests.storage.conftest import BIG_ID, make_post, make_review

MAX = 1000


def test_valid_records_pass() -> None:
    assert schema.validate_post(make_post(BIG_ID, user_id=BIG_ID - 1), MAX) == []
    assert schema.validate_review(make_review("r1"), MAX) == []


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"id": 0}, "id=0"),
        ({"user_id": -5}, "userId=-5"),
        ({"id": "123"}, "id must be an integer"),
        ({"likes": 1.5}, "likes must be an integer"),
        ({"pinned": "yes"}, "pinned must be a bool"),
        ({"text": 7}, "text must be text"),
        ({"text": "长" * (MAX + 1)}, "over storage.max_text_chars"),
        ({"pictures": "a.jpg"}, "pictures must be a list"),
        ({"created_at": ""}, "createdAt"),
        ({"created_at": "yesterday"}, "not ISO 8601"),
        ({"created_at": "2024-05-01T12:00:00"}, "no UTC offset"),
    ],
)
def test_bad_posts_say_why(changes: dict[str, Any], reason: str) -> None:
    errors = schema.validate_post(make_post(1, **changes), MAX)
    assert any(reason in error for error in errors), errors


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"id": ""}, "id is missing"),
        ({"product_id": "a/b"}, "productId"),
        ({"score": 9}, "score=9"),
        ({"content": "x" * (MAX + 1)}, "over storage.max_text_chars"),
        ({"created_at": "2024-13-01T00:00:00+08:00"}, "not ISO 8601"),
    ],
)
def test_bad_reviews_say_why(changes: dict[str, Any], reason: str) -> None:
    errors = schema.validate_review(make_review("r1", **changes), MAX)
    assert any(reason in error for error in errors), errors


def test_batch_splits_valid_from_rejected_and_refuses_empty_or_oversized() -> None:
    batch = [make_post(1), make_post(0), make_post(2, text="x" * (MAX + 1)), make_post(3)]
    rows, rejected = schema.build_rows(batch, 10, lambda post: schema.checked_post_row(post, MAX))
    assert [row.columns["id"] for row in rows] == [1, 3]
    assert [index for index, _ in rejected] == [1, 2]
    with pytest.raises(InvalidArgumentError) as empty:
        schema.build_rows([], 10, lambda post: schema.checked_post_row(post, MAX))
    assert empty.value.code == "EmptyBatch"
    with pytest.raises(InvalidArgumentError) as big:
        schema.build_rows([make_post(1)] * 11, 10, lambda post: schema.checked_post_row(post, MAX))
    assert big.value.code == "BatchTooLarge"


def test_row_key_groups_an_owner_newest_first_and_ignores_delivery() -> None:
    older, newer = schema.post_row(make_post(5, minute=1)), schema.post_row(make_post(4, minute=2))
    other_user = schema.post_row(make_post(6, user_id=USER_2, minute=3))
    prefix = schema.owner_prefix(schema.WEIBO, make_post(5).user_id)
    assert older.key.startswith(prefix) and newer.key.startswith(prefix)
    assert not other_user.key.startswith(prefix)
    assert newer.key < older.key  # newest first inside the owner's range
    # the same item delivered again (even with new counters) gets the same key: an overwrite, not a duplicate
    assert schema.post_row(make_post(5, minute=1, likes=99)).key == older.key
    assert len(older.key) == 1 + 8 + 8 + 8
    review = schema.review_row(make_review("abc"))
    assert review.key.startswith(schema.owner_prefix(schema.REVIEW, "100012043978"))
    assert review.key.endswith(b"abc")


USER_2 = 42


def test_post_roundtrip_keeps_64_bit_ids_and_unicode() -> None:
    post = make_post(BIG_ID, user_id=BIG_ID - 2, retweeted_id=BIG_ID - 1, pinned=True)
    row = schema.post_row(post)
    table, (decoded,) = schema.decode_rows(schema.encode_rows(schema.WEIBO, [row]))
    assert table == schema.WEIBO
    assert decoded == row
    again: Post = schema.post_from_row(decoded)
    assert again == post
    assert again.id == (1 << 63) - 7
    review = make_review("ecshop-3f2a9c")
    assert schema.review_from_row(schema.review_row(review)) == review


def test_time_needs_an_offset() -> None:
    assert schema.parse_time_ms("1970-01-01T08:00:01+08:00") == 1000
    with pytest.raises(ValueError, match="offset"):
        schema.parse_time_ms("2024-05-01T12:00:00")


_POST_CHANGES: list[dict[str, object]] = [
    {},
    {"fetched_at": ""},
    {"pictures": []},
    {"pictures": ["a.jpg", 'b"c.jpg', "长.jpg"]},
    {"pinned": True},
    {"retweeted_id": BIG_ID},
    {"id": BIG_ID, "user_id": BIG_ID - 1},
    {"text": "长" * MAX},
    {"likes": 2**31 - 1},
    {"id": 0},
    {"user_id": -5},
    {"id": "123"},
    {"likes": 1.5},
    {"likes": True},
    {"likes": 2**31},
    {"pinned": "yes"},
    {"text": 7},
    {"text": "长" * (MAX + 1)},
    {"pictures": "a.jpg"},
    {"pictures": [1]},
    {"pictures": ["x" * MAX, "y"]},
    {"created_at": ""},
    {"created_at": "yesterday"},
    {"created_at": "2024-05-01T12:00:00"},
    {"fetched_at": "2024-05-01T12:00:00"},
    {"fetched_at": "soon"},
    {"fetched_at": None},
]


@pytest.mark.parametrize("changes", _POST_CHANGES)
def test_checked_post_row_agrees_with_validate_post_and_post_row(changes: dict[str, Any]) -> None:
    post = make_post(7, **changes)
    errors = schema.validate_post(post, MAX)
    assert schema.checked_post_row(post, MAX) == (errors or schema.post_row(post))
    assert schema.checked_post_row("not a post", MAX) == schema.validate_post("not a post", MAX)


def test_build_rows_keeps_order_and_reasons() -> None:
    batch: list[Any] = [make_post(1), make_post(0), make_review("r1"), make_post(3)]
    rows, rejected = schema.build_rows(batch, 10, lambda post: schema.checked_post_row(post, MAX))
    assert rows == [schema.post_row(batch[0]), schema.post_row(batch[3])]
    assert rejected == [
        (1, "; ".join(schema.validate_post(batch[1], MAX))),
        (2, "; ".join(schema.validate_post(batch[2], MAX))),
    ]
    for bad, code in (([], "EmptyBatch"), ([make_post(1)] * 11, "BatchTooLarge")):
        with pytest.raises(InvalidArgumentError) as refused:
            schema.build_rows(bad, 10, lambda post: schema.checked_post_row(post, MAX))
        assert refused.value.code == code

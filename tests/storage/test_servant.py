"""The servant hands Slice posts to the service as they are (``SLICE_POSTS``): the rows and the reasons must be
exactly those of converting every post to a core ``Post`` first."""

from __future__ import annotations

from typing import Any

import pytest

from icecrawler import rpc
from storage_server import schema
from storage_server.servant import SLICE_POSTS
from tests.storage.conftest import make_post
from tests.storage.test_schema import _POST_CHANGES, MAX

#: Core field name -> Slice member name, for the fields whose names differ.
_SLICE_NAMES = {
    "user_id": "userId",
    "user_name": "userName",
    "created_at": "createdAt",
    "retweeted_id": "retweetedId",
    "fetched_at": "fetchedAt",
}


def _slice_post(post_id: int, **changes: Any) -> Any:
    """A Slice post with ``changes`` set as given (bad types too: Python does not check them until marshalling)."""
    post = rpc.post_to_slice(make_post(post_id))
    for name, value in changes.items():
        setattr(post, _SLICE_NAMES.get(name, name), value)
    return post


@pytest.mark.parametrize("changes", _POST_CHANGES)
def test_slice_posts_give_the_rows_and_reasons_of_the_core_path(changes: dict[str, object]) -> None:
    post = _slice_post(7, **changes)
    expected = schema.checked_post_row(rpc.post_from_slice(post), MAX)
    assert schema.checked_post_row(post, MAX, SLICE_POSTS) == expected
    assert isinstance(expected, schema.Row) == (not schema.validate_post(rpc.post_from_slice(post), MAX))


def test_slice_format_reads_the_fields_in_column_order() -> None:
    post = _slice_post(9)
    core = rpc.post_from_slice(post)
    assert SLICE_POSTS.values(post) == schema.CORE_POSTS.values(core)
    assert SLICE_POSTS.kind is rpc.crawler().Post


def test_records_of_another_type_get_validate_posts_reasons() -> None:
    records: tuple[Any, ...] = ("not a post", make_post(3), None)
    for record in records:
        expected = schema.validate_post(record, MAX) or schema.post_row(record)
        assert schema.checked_post_row(record, MAX, SLICE_POSTS) == expected

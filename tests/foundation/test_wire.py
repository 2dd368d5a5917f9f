"""The wire limits shared by the client's screen and the storage server's validation."""

from __future__ import annotations

from icecrawler.wire import INT64_MAX, INT64_MIN, lone_surrogate_at


def test_a_lone_surrogate_is_found_at_its_offset_and_valid_text_passes() -> None:
    assert lone_surrogate_at("plain ascii") is None
    assert lone_surrogate_at("今天天气不错 🙂") is None
    assert lone_surrogate_at("好评\ud800差评") == 2
    assert lone_surrogate_at("\udfff") == 0


def test_the_long_range_is_slices() -> None:
    assert (INT64_MIN, INT64_MAX) == (-(2**63), 2**63 - 1)

"""The shared mechanisms: dates, counts, decoding, byte-marker and HTTP classification, cursors, registry."""

from __future__ import annotations

import re

import pytest
import urllib3

from crawler_client.sources import SOURCES, get_source
from crawler_client.sources._counts import MAX_COUNT, parse_count, parse_id
from crawler_client.sources._cursor import PostOrder, ReviewOrder
from crawler_client.sources._dates import created_at_of, iso_of_ms, resolve_created_at
from crawler_client.sources._decode import decode_body, first_text, html_text, make_soup, strip_jsonp
from crawler_client.sources._detect import (
    WEIBO_MARKERS,
    check_final_url,
    check_http,
    retry_after_seconds,
    scan_markers,
)
from icecrawler.errors import ConfigError, FetchError
from icecrawler.models import SOURCES as MODEL_SOURCES
from icecrawler.models import Outcome, Post, Review
from tests.client._util import NOW_MS, fetched


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("刚刚", "2021-07-06T12:00:00+08:00"),
        ("30秒前", "2021-07-06T11:59:30+08:00"),
        ("5分钟前", "2021-07-06T11:55:00+08:00"),
        (" 18分钟前", "2021-07-06T11:42:00+08:00"),
        ("3小时前", "2021-07-06T09:00:00+08:00"),
        ("今天 08:15", "2021-07-06T08:15:00+08:00"),
        ("昨天 12:25", "2021-07-05T12:25:00+08:00"),
        ("06-27", "2021-06-27T00:00:00+08:00"),
        ("12-30", "2020-12-30T00:00:00+08:00"),  # a date "in the future" is last year's
        ("5月1日 17:27", "2021-05-01T17:27:00+08:00"),
        ("2020-12-31", "2020-12-31T00:00:00+08:00"),
        ("2017-5-1 17:27", "2017-05-01T17:27:00+08:00"),
        ("2024-03-05 21:04:11", "2024-03-05T21:04:11+08:00"),
        ("Tue Jun 08 09:35:04 +0800 2021", "2021-06-08T09:35:04+08:00"),
        ("Tue Jun 08 01:35:04 +0000 2021", "2021-06-08T09:35:04+08:00"),
        ("2026-07-25T10:00:00+08:00", "2026-07-25T10:00:00+08:00"),
        ("2026-07-25T02:00:00Z", "2026-07-25T10:00:00+08:00"),
        ("2026-07-25T02:00:00.123+0000", "2026-07-25T10:00:00+08:00"),
        ("2026-02-30T10:00:00+08:00", ""),
        ("", ""),
        ("昨天", ""),
        ("13-45", ""),
        ("Tue Foo 08 09:35:04 +0800 2021", ""),
    ],
)
def test_created_at_forms_resolve_against_now_in_cst(text: str, expected: str) -> None:
    assert resolve_created_at(text, NOW_MS) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1493630875000, "2017-05-01T17:27:55+08:00"),  # epoch ms, a JSON number
        ("1493630875000", "2017-05-01T17:27:55+08:00"),  # ... a digit string
        (1493630875000.0, "2017-05-01T17:27:55+08:00"),
        (1493630875, "2017-05-01T17:27:55+08:00"),  # epoch seconds
        (" 1493630875 ", "2017-05-01T17:27:55+08:00"),
        ("1493630875.5", "2017-05-01T17:27:55+08:00"),
        ("5分钟前", "2021-07-06T11:55:00+08:00"),  # text goes through resolve_created_at
        ("2017-05-01 17:27:55", "2017-05-01T17:27:55+08:00"),
        (None, ""),
        (True, ""),
        (0, ""),
        (-1493630875000, ""),
        (20170501, ""),  # eight digits: no epoch time of this century, not a date in 1970
        ("20170501", ""),
        (10**20, ""),
        (float("nan"), ""),
        (float("inf"), ""),
        ({"t": 1493630875000}, ""),
        ("1493630875000ms", ""),
    ],
)
def test_created_at_of_reads_text_and_epoch_seconds_or_ms(value: object, expected: str) -> None:
    """Whatever JSON value a site puts in its time field: text, epoch s or ms (number or digit string), or junk."""
    assert created_at_of(value, NOW_MS) == expected


def test_epoch_ms_and_out_of_range() -> None:
    assert iso_of_ms(1493630875000) == "2017-05-01T17:27:55+08:00"
    assert iso_of_ms(10**20) == ""


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (5, 5),
        ("12", 12),
        ("1,234", 1234),
        ("100万+", 1_000_000),
        ("1.5万", 15_000),
        ("2亿", 200_000_000),
        ("转发", 0),
        ("评论", 0),
        ("赞", 0),
        ("", 0),
        (None, 0),
        (-3, 0),
        (True, 1),
        (2.7, 2),
        ("abc", 0),
        (float("nan"), 0),
        ([], 0),
        ("9" * 400, 0),
        ("100亿", MAX_COUNT),
        (2**40, MAX_COUNT),
    ],
)
def test_counts(value: object, expected: int) -> None:
    assert parse_count(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("4102647604266970", 4102647604266970),
        (4102647604266970, 4102647604266970),
        (" 12 ", 12),
        ("", 0),
        (None, 0),
        (True, 0),
        (-5, 0),
        ("1e5", 0),
        ("١٢", 0),
        ("9" * 19, 0),
        (2**63 - 1, 2**63 - 1),
        (2**63, 0),
    ],
)
def test_ids_fit_a_slice_long(value: object, expected: int) -> None:
    assert parse_id(value) == expected


def test_decode_falls_back_to_gb18030_and_strips_bom() -> None:
    assert decode_body("网络繁忙".encode("gbk")) == "网络繁忙"
    assert decode_body(b"\xef\xbb\xbf{}") == "{}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('fetchJSON_comment98({"a":1});', '{"a":1}'),
        ('  cb ( {"a":1} )\n', '{"a":1}'),
        ('{"a":1}', '{"a":1}'),
        ("fetchJSON_comment98();", ""),
        ("<html>(x)</html>", "<html>(x)</html>"),
    ],
)
def test_strip_jsonp(text: str, expected: str) -> None:
    assert strip_jsonp(text) == expected


def test_html_text_keeps_emoticon_alts_and_line_breaks() -> None:
    soup = make_soup('a<br />b <span class="url-icon"><img alt="[doge]" src="x.png"></span>  c')
    assert html_text(soup) == "a\nb [doge] c"


def test_html_text_drops_zero_width_spaces_unless_asked_to_keep_them() -> None:
    """Weibo pads posts with U+200B; kept, one post's text differed between sources. Joiners stay (emoji need them)."""
    soup = make_soup("<p>你好\u200b\u200b <b>世界</b>\u200b 👨\u200d👩</p>")
    assert html_text(soup) == "你好 世界 👨\u200d👩"
    assert html_text(soup, keep_zero_width=True) == "你好\u200b\u200b 世界\u200b 👨\u200d👩"


def test_make_soup_is_quiet_on_url_and_xml_like_markup() -> None:
    for markup in ("http://example.com/", "file.html", '<?xml version="1.0"?><rss></rss>', ""):
        make_soup(markup)  # filterwarnings=error turns any bs4 warning into a failure


@pytest.mark.parametrize("encoding", ["utf-8", "gbk"])
def test_markers_found_in_either_encoding(encoding: str) -> None:
    body = "<html><em>抱歉，网络繁忙</em></html>".encode(encoding)
    marker = scan_markers(body, WEIBO_MARKERS)
    assert marker is not None and marker.outcome is Outcome.Busy


def test_frozen_wins_over_the_shared_busy_skeleton() -> None:
    body = "$CONFIG['bpType']='sorry'; 您的帐号存在异常".encode("gbk")
    marker = scan_markers(body, WEIBO_MARKERS)
    assert marker is not None and marker.outcome is Outcome.AccountFrozen


@pytest.mark.parametrize(
    ("status", "headers", "outcome", "retry"),
    [
        (418, {}, "Banned", 0.0),
        (403, {}, "Banned", 0.0),
        (432, {}, "Banned", 0.0),
        (414, {}, "Banned", 0.0),
        (429, {}, "RateLimited", 0.0),
        (429, {"Retry-After": "120"}, "RateLimited", 120.0),
        (503, {"retry-after": "Tue, 06 Jul 2021 04:01:00 GMT"}, "RateLimited", 60.0),
        (404, {}, "NotFound", 0.0),
        (500, {}, "HttpError", 0.0),
        (401, {}, "LoginRequired", 0.0),
    ],
)
def test_http_statuses_are_classified(status: int, headers: dict[str, str], outcome: str, retry: float) -> None:
    with pytest.raises(FetchError) as info:
        check_http(fetched(b"", status=status, headers=headers), NOW_MS)
    assert info.value.outcome == outcome
    assert info.value.http_status == status
    assert info.value.retry_after_s == pytest.approx(retry)


@pytest.mark.parametrize("status", [403, 500, 429])
def test_a_retry_after_sent_twice_holds_the_longer_wait(status: int) -> None:
    """urllib3's headers give a repeated header once per value: each Retry-After counts, not the first only."""
    headers = urllib3.HTTPHeaderDict()
    headers.add("Retry-After", "60")
    headers.add("Retry-After", "120")
    with pytest.raises(FetchError) as info:
        check_http(fetched(b"", status=status, headers=headers), NOW_MS)
    assert (info.value.outcome, info.value.retry_after_s) == ("RateLimited", 120.0)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("inf, 7", 7.0),  # three letters that are no weekday keep the next value their own
        ("now, 120", 120.0),
        ("Thu, 120", 0.0),  # a weekday glued to what follows: no date, no wait
        ("Sunday, 06-Nov-94 08:49:37 GMT", 0.0),  # RFC 850, long past: read as before
        ("," * 65536 + "9", 0.0),  # only the first few joined values are read
        ("5," + "," * 65536, 5.0),
    ],
)
def test_joined_retry_after_values(value: str, seconds: float) -> None:
    assert retry_after_seconds(value, NOW_MS) == seconds


def test_ok_statuses_pass_and_junk_retry_after_is_zero() -> None:
    check_http(fetched(b"{}", status=200), NOW_MS)
    check_http(fetched(b"", status=302), NOW_MS)
    assert retry_after_seconds("soon", NOW_MS) == 0.0


@pytest.mark.parametrize(
    "url",
    [
        "https://passport.weibo.com/visitor/visitor?entry=miniblog&a=enter",
        "https://passport.weibo.cn/signin/welcome?entry=mweibo",
        "https://weibo.com/login.php",
        # today's weibo.com login page: a saved (unfollowed) redirect there was "not a JSON object"
        "https://weibo.com/newlogin?tabtype=weibo&gid=102803&url=https%3A%2F%2Fweibo.com%2Fu%2F1",
    ],
)
def test_login_and_visitor_redirects(url: str) -> None:
    with pytest.raises(FetchError) as info:
        check_final_url(fetched(b"{}", final_url=url), "https://m.weibo.cn/api/container/getIndex")
    assert info.value.outcome == "LoginRequired"
    assert info.value.error_class == ("visitor" if "visitor" in url else "login-redirect")


def test_post_cursor_a_pinned_post_never_ends_a_walk_but_counts_in_the_cursor() -> None:
    old, new, pinned = Post(id=10, user_id=1), Post(id=30, user_id=1), Post(id=5, user_id=1, pinned=True)
    assert PostOrder.cursor_of(new) == "30"
    assert PostOrder.is_older_or_equal(old, "10") and PostOrder.is_older_or_equal(old, "20")
    assert not PostOrder.is_older_or_equal(new, "20")
    assert not PostOrder.is_older_or_equal(pinned, "20")
    assert not PostOrder.is_older_or_equal(old, "")
    assert PostOrder.newest_cursor([pinned, old, new], "20") == "30"  # an old pinned post cannot lower it
    # one newer than the rest (pinned as soon as published) is the newest post: known from then on
    assert PostOrder.newest_cursor([Post(id=99, user_id=1, pinned=True)], "20") == "99"


def test_review_cursor_is_time_then_id() -> None:
    newer = Review(id="b", product_id="1", created_at="2024-03-05T21:04:11+08:00")
    same = Review(id="a", product_id="1", created_at="2024-03-04T09:00:00+08:00")
    twin = Review(id="z", product_id="1", created_at="2024-03-04T09:00:00+08:00")
    older = Review(id="c", product_id="1", created_at="2024-03-03T10:00:00+08:00")
    cursor = ReviewOrder.cursor_of(same)
    assert cursor == "2024-03-04T09:00:00+08:00|a"
    assert ReviewOrder.is_older_or_equal(same, cursor) and ReviewOrder.is_older_or_equal(older, cursor)
    assert not ReviewOrder.is_older_or_equal(newer, cursor)
    assert not ReviewOrder.is_older_or_equal(twin, cursor)  # same second, other review: keep it
    assert not ReviewOrder.is_older_or_equal("42", cursor)  # listing items have no order
    assert ReviewOrder.newest_cursor([older, newer, same]) == ReviewOrder.cursor_of(newer)


def test_registry_covers_every_model_source_and_rejects_unknown_names() -> None:
    assert set(SOURCES) == set(MODEL_SOURCES)
    for name, kinds in MODEL_SOURCES.items():
        source = get_source(name)
        assert source.name == name and source.kinds == kinds
    with pytest.raises(ConfigError, match=re.escape(f"unknown source 'weibo' (known: {', '.join(sorted(SOURCES))})")):
        get_source("weibo")


def test_public_names_are_exported_sorted() -> None:
    import crawler_client.sources as package

    assert all(hasattr(package, name) for name in package.__all__)
    core = {"SOURCES", "get_source", "Source", "PageRequest", "ParsedPage", "FetchedPage", "Item"}
    assert core <= set(package.__all__)
    # The source classes are reached through the registry, not imported here: a new source edits no package file.
    assert not {cls.__name__ for cls in package.SOURCES.values()} & set(package.__all__)
    # isort order, as ruff keeps it: CONSTANTS, then Classes, then functions
    assert package.__all__ == sorted(package.__all__, key=lambda n: (not n.isupper(), not n[0].isupper(), n))


def test_bench_cases_parse_into_items() -> None:
    from bench._pages import bench_cases

    cases = bench_cases()
    assert [case.name for case in cases][:3] == ["weibo_pc/chunk0", "weibo_pc/chunk1", "weibo_pc/chunk2"]
    for case in cases:
        page = get_source(case.source).parse(case.task, case.request, case.page, case.now_ms)
        assert len(page.items) in (5, 10, 15, 20), case.name


def test_unfollowed_redirect_to_the_visitor_system() -> None:
    page = fetched(b"", status=302, headers={"Location": "https://passport.weibo.com/visitor/visitor?entry=miniblog"})
    with pytest.raises(FetchError) as info:
        check_final_url(page, "https://weibo.com/p/aj/v6/mblog/mbloglist")
    assert info.value.outcome == "LoginRequired" and info.value.error_class == "visitor"


def test_first_text_takes_the_first_key_holding_non_blank_text() -> None:
    """One helper for every "the same thing under several keys" read (Weibo's ``said``, JD's refusal words and row
    text): blank text, a number, null or a missing key passes to the next key, and the text is returned unstripped."""
    doc = {"msg": "  ", "message": 5, "error": None, "echo": " 系统繁忙 ", "resultMsg": "later"}
    assert first_text(doc, ("msg", "message", "error", "missing", "echo", "resultMsg")) == " 系统繁忙 "
    assert first_text(doc, ("msg", "message")) == "" and first_text({}, ()) == ""

"""Every parser, fed garbage, truncated, mis-encoded, structurally wrong and huge inputs, ends as a ParsedPage
or a classified FetchError/ParseError — never any other exception (and never a bs4 warning).

A parser is fuzzed through its entries in ``CASES`` (a valid page to mutate, from ``sandbox.samples``); a source
added to ``crawler_client/sources`` without one fails ``test_every_source_has_a_case``, which says what to add.
``json_values`` builds wrong JSON from the keys the known formats use: add a new format's keys there."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawler_client.sources import PageRequest, ParsedPage, get_source
from crawler_client.sources._decode import html_text, html_texts, make_soup
from crawler_client.sources.weibo_mobile import WeiboMobileSource
from crawler_client.sources.weibo_pc import WeiboPcSource
from icecrawler.errors import FetchError
from icecrawler.models import Post, Task, TaskKind
from icecrawler.sourcespec import SOURCE_PACKAGE, registry
from sandbox.samples import (
    ecshop_comment_json,
    ecshop_goods_page,
    jd_comments,
    mbloglist_chunk,
    mobile_timeline,
    web_timeline,
)
from tests.client._util import BASE, NOW_MS, fetched, fixture, make_task

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: Tests repeated for each case get fewer examples each (the cores are shared).
FUZZ_EACH = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: (source, task kind, target, a valid body to mutate, how the request is shaped)
CASES: list[tuple[str, TaskKind, str, Callable[[], bytes]]] = [
    ("weibo_pc", TaskKind.WeiboUser, "1163218074", lambda: mbloglist_chunk(posts=4)),
    ("weibo_mobile", TaskKind.WeiboUser, "1907518591", lambda: mobile_timeline(posts=4)),
    ("weibo_web", TaskKind.WeiboUser, "1907518591", lambda: web_timeline(posts=4)),
    ("jd", TaskKind.ProductReviews, "100012043978", lambda: fixture("jd_lego_comments.json")),
    ("ecshop", TaskKind.ProductReviews, "42", lambda: ecshop_goods_page(42)),
    ("ecshop", TaskKind.ProductReviews, "42", lambda: ecshop_comment_json(42, 2)),
    ("ecshop", TaskKind.Listing, "3", lambda: fixture("ecshop_category3_p1.html")),
    ("jd", TaskKind.ProductReviews, "100012043978", lambda: jd_comments(comments=3)),
]
IDS = [f"{source}-{kind.value}-{i}" for i, (source, kind, _, _) in enumerate(CASES)]


def test_every_source_has_a_case() -> None:
    built_in = {name for name in registry if registry.module(name).__name__.startswith(SOURCE_PACKAGE + ".")}
    missing = sorted(built_in - {source for source, _, _, _ in CASES})
    assert not missing, (
        f"add an entry to CASES in tests/client/test_fuzz.py for {missing}: (source, kind, target, page)"
    )


def _request(source: str, task: Task, body: bytes) -> PageRequest:
    request = get_source(source).first_request(task, BASE)
    if source == "weibo_mobile":
        return WeiboMobileSource().timeline_request(BASE, task.target)
    if source == "ecshop" and body.lstrip().startswith(b"{"):
        return get_source(source).comment_page_request(BASE, task.target, 2, 1)  # type: ignore[attr-defined]
    return request


def run_parser(
    case: tuple[str, TaskKind, str, Callable[[], bytes]], body: bytes, *, status: int = 200, final_url: str = ""
) -> None:
    source, kind, target, _ = case
    task = make_task(source, target, kind)
    request = _request(source, task, body)
    try:
        result = get_source(source).parse(
            task, request, fetched(body, request, status=status, final_url=final_url), NOW_MS
        )
    except FetchError as exc:  # ParseError is a FetchError
        assert exc.outcome and exc.error_class
        return
    assert isinstance(result, ParsedPage)
    assert all(item is not None for item in result.items)


@pytest.mark.parametrize("case", CASES, ids=IDS)
@FUZZ_EACH
@given(body=st.binary(max_size=2048))
def test_random_bytes(case: tuple[str, TaskKind, str, Callable[[], bytes]], body: bytes) -> None:
    run_parser(case, body)


@pytest.mark.parametrize("case", CASES, ids=IDS)
@FUZZ_EACH
@given(
    cut=st.floats(min_value=0, max_value=1),
    flip=st.integers(min_value=0, max_value=255),
    at=st.floats(min_value=0, max_value=1),
)
def test_truncated_and_corrupted_valid_pages(
    case: tuple[str, TaskKind, str, Callable[[], bytes]], cut: float, flip: int, at: float
) -> None:
    body = bytearray(case[3]())
    body = body[: int(len(body) * cut)] or bytearray(b"{")
    position = int((len(body) - 1) * at)
    body[position] = flip
    run_parser(case, bytes(body))


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("encoding", ["gbk", "utf-16", "latin-1", "big5"])
def test_mis_encoded_valid_pages(case: tuple[str, TaskKind, str, Callable[[], bytes]], encoding: str) -> None:
    text = case[3]().decode("utf-8")
    run_parser(case, text.encode(encoding, errors="replace"))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "ok",
                    "data",
                    "cards",
                    "mblog",
                    "id",
                    "user",
                    "text",
                    "comments",
                    "maxPage",
                    "content",
                    "error",
                    "code",
                    "cardlistInfo",
                    "since_id",
                    "page",
                    "pics",
                    "large",
                    "url",
                    "isTop",
                    "retweeted_status",
                    "created_at",
                    "score",
                    "creationTime",
                    "card_group",
                    "msg",
                ]
            ),
            children,
            max_size=6,
        )
    ),
    max_leaves=30,
)


@pytest.mark.parametrize("case", CASES, ids=IDS)
@FUZZ_EACH
@given(value=json_values, jsonp=st.booleans())
def test_structurally_wrong_json(
    case: tuple[str, TaskKind, str, Callable[[], bytes]], value: object, jsonp: bool
) -> None:
    body = json.dumps(value).encode()
    run_parser(case, b"fetchJSON_comment98(" + body + b");" if jsonp else body)


@FUZZ_EACH
@given(
    mblog=st.dictionaries(
        st.sampled_from(
            [
                "id",
                "mid",
                "user",
                "text",
                "created_at",
                "reposts_count",
                "pics",
                "retweeted_status",
                "title",
                "isTop",
                "bid",
                "isLongText",
            ]
        ),
        json_values,
        max_size=8,
    )
)
def test_mobile_cards_with_wrong_types(mblog: dict[str, object]) -> None:
    doc = {
        "ok": 1,
        "data": {"cardlistInfo": {"since_id": mblog.get("id")}, "cards": [{"card_type": 9, "mblog": mblog}]},
    }
    run_parser(CASES[1], json.dumps(doc).encode())


MARKUP_ALPHABET = list("<>/=\"' abcdiv-_action-typefeed_list_itemmid0123456789em展开全文转发")


@FUZZ
@given(html=st.text(alphabet=st.sampled_from(MARKUP_ALPHABET), max_size=600))
def test_pc_fragments_of_random_markup(html: str) -> None:
    run_parser(CASES[0], json.dumps({"code": "100000", "data": html}).encode())


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_huge_inputs(case: tuple[str, TaskKind, str, Callable[[], bytes]]) -> None:
    run_parser(case, b"[" * 200_000 + b"]" * 200_000)  # deep nesting: RecursionError must not escape
    run_parser(case, b"{" + b" " * 1_000_000 + b"}")
    run_parser(case, b"<div>" * 20_000)
    run_parser(case, case[3]() * 10)  # concatenated valid pages


def test_huge_but_valid_chunk_parses() -> None:
    run_parser(CASES[0], mbloglist_chunk(posts=150))


@pytest.mark.parametrize("source", [WeiboMobileSource(), WeiboPcSource()], ids=["mobile", "pc"])
@FUZZ_EACH
@given(
    body=st.binary(max_size=512)
    | json_values.map(lambda v: json.dumps(v).encode())
    | json_values.map(lambda v: json.dumps({"code": "100000", "ok": 1, "data": v}).encode())
)
def test_extend_never_raises_anything_else(source: WeiboMobileSource | WeiboPcSource, body: bytes) -> None:
    request = source.extend_request(BASE, 1)
    try:
        assert isinstance(source.parse_extend(request, fetched(body, request), NOW_MS), str)
    except FetchError as exc:
        assert exc.outcome


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("status", [0, 204, 301, 403, 404, 414, 418, 429, 432, 500, 999])
def test_any_status(case: tuple[str, TaskKind, str, Callable[[], bytes]], status: int) -> None:
    run_parser(case, case[3](), status=status)


# --- one soup per page gives the same texts as one soup per fragment ----------------------------------------

#: Pieces real post markup is made of, plus the broken ones that must not leak into a neighbour's text.
_MARKUP_PIECES = st.sampled_from(
    [
        "转发",
        "微博正文 ",
        "&amp;",
        "&lt;b&gt;",
        "\n",
        "  ",
        "<br />",
        "<br>",
        '<a href="/n/x">@某人</a>',
        '<span class="url-icon"><img alt=[doge] src="d.png" /></span>',
        '<img alt="[笑]">',
        "<b>",
        "</b>",
        "<a>",
        "</a>",
        "<div>",
        "</div>",
        "</body>",
        "</html>",
        "<p>",
        "<table><td>",
        "<!--",
        "-->",
        "<script>",
        "</script>",
        '<div class="icecrawler-fragment">',
        "\x00",
        "ok",
        '<a href="x',
        '<img alt="',
        "<3",
        "</ a>",
        "<?x",
        "</>",
        "<span>",
        "</span>",
        "&am",
        "<BR/>",
        '"',
    ]
)
_FRAGMENTS = st.lists(st.lists(_MARKUP_PIECES, max_size=8).map("".join), max_size=6)


@FUZZ
@given(_FRAGMENTS)
def test_html_texts_of_a_page_equal_each_fragment_parsed_alone(fragments: list[str]) -> None:
    assert html_texts(fragments) == [html_text(make_soup(f)) if f else "" for f in fragments]


def test_mobile_page_texts_match_per_post_parsing() -> None:
    body = mobile_timeline(posts=10)
    task = make_task("weibo_mobile", "1907518591", TaskKind.WeiboUser)
    source = WeiboMobileSource()
    parsed = source.parse(task, PageRequest(url=f"{BASE}/m/api/container/getIndex"), fetched(body), NOW_MS)
    mblogs = [card["mblog"] for card in json.loads(body)["data"]["cards"] if "mblog" in card]
    posts = [item for item in parsed.items if isinstance(item, Post)]
    assert len(posts) == len(parsed.items)
    assert [post.text for post in posts] == [html_text(make_soup(m["text"])) for m in mblogs]
    assert all(post.text for post in posts)


_INLINE_PIECES = st.sampled_from(
    [
        "转发",
        "正文 ",
        "&amp;",
        "&lt;",
        "&am",
        "\n",
        " ",
        "<br />",
        "<BR>",
        '<a href="/n/x">@某人</a>',
        "<a>",
        "</a>",
        '<a href="x',
        '<img alt="',
        '<span class="url-icon"><img alt=[doge] src="d.png" /></span>',
        "<b>",
        "</b>",
        "</span>",
        "<3",
        '"',
        ">",
        "'",
        "\x00",
        "ok",
        "<a b'c' d=\"e\">",
        '<img alt="转" />',
    ]
)


@FUZZ
@given(st.lists(st.lists(_INLINE_PIECES, max_size=8).map("".join), min_size=2, max_size=6))
def test_html_texts_of_inline_fragments_equal_each_fragment_parsed_alone(fragments: list[str]) -> None:
    # inline-only markup takes the one-soup path; broken quotes and stray end tags must not shift any text
    assert html_texts(fragments) == [html_text(make_soup(f)) if f else "" for f in fragments]

"""Bodies no parser can read — empty, cut short, compressed bytes the HTTP layer did not undo, UTF-16 text — fail
every source's crawl as a ParseError that says which of these the body is (the crawl keeps its cursor and is retried:
nothing is lost), instead of the bare "not a JSON object" that sent an operator to the saved bytes to find out."""

from __future__ import annotations

import gzip
import json

import pytest

from crawler_client.sources import get_source
from crawler_client.sources._decode import describe_unreadable, load_json
from icecrawler.errors import ParseError
from icecrawler.models import TaskKind
from tests.client._util import BASE, make_task, parse

#: A small answer of each source's own shape (our own values), to cut short, compress or re-encode.
_ANSWERS = {
    "jd": ("100012043978", 'fetchJSON_comment98({"comments":[{"id":1,"content":"不错"}],"maxPage":1});'),
    "weibo_web": ("5612345678", '{"ok":1,"data":{"list":[{"id":1,"user":{"id":5612345678}}],"since_id":""}}'),
    "weibo_mobile": ("5612345678", 'jsonp_1({"ok":1,"data":{"cardlistInfo":{},"cards":[]}})'),
    "weibo_pc": ("5612345678", '{"code":"100000","msg":"","data":"<div class=\\"WB_feed\\"></div>"}'),
}


def _variants(text: str) -> dict[str, tuple[bytes, str]]:
    """Each unreadable form of ``text``, with the words the error must say."""
    raw = text.encode()
    return {
        "cut-short": (raw[: len(raw) * 2 // 3], "cut short"),
        "gzip": (gzip.compress(raw), "gzip"),
        "utf-16": (text.encode("utf-16"), "UTF-16"),
        "empty": (b"", "empty"),
    }


@pytest.mark.parametrize(
    ("name", "variant"),
    [
        (name, variant)
        for name in sorted(_ANSWERS)
        for variant in ("cut-short", "gzip", "utf-16", "empty")
        if (name, variant) != ("jd", "empty")  # JD's empty answer is its login wall (jd-blocked: test_jd.py)
    ],
)
def test_an_unreadable_body_is_a_parse_error_that_says_what_it_is(name: str, variant: str) -> None:
    target, answer = _ANSWERS[name]
    body, words = _variants(answer)[variant]
    task = make_task(name, target)
    with pytest.raises(ParseError) as info:
        parse(name, task, get_source(name).first_request(task, BASE), body)
    assert words in str(info.value), str(info.value)
    assert info.value.http_status == 200


def test_an_ecshop_comment_answer_cut_short_says_so() -> None:
    task = make_task("ecshop", "5", TaskKind.ProductReviews)
    request = get_source("ecshop").comment_page_request(BASE, "5", 2, 0)  # type: ignore[attr-defined]
    body = json.dumps({"error": 0, "message": "", "content": "<ul><li>好</li></ul>"}).encode()[:30]
    with pytest.raises(ParseError) as info:
        parse("ecshop", task, request, body)
    assert "cut short" in str(info.value)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"", "empty"),
        (b"  \r\n", "empty"),
        (gzip.compress(b"{}"), "gzip"),
        (b"\x28\xb5\x2f\xfd\x00\x00", "zstd"),
        ('{"a":"好","b":"text"}'.encode("utf-16-le"), "UTF-16"),
        ('{"a":"好","b":"text"}'.encode("utf-16-be"), "UTF-16"),
        ('{"a":"好"}'.encode("utf-16"), "UTF-16"),
        (b"\x00\x01\x02binary", "binary"),
        (b"\x00" * 20, "binary"),  # NULs at both parities: no UTF-16 text
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10\x00\x00\x00\x10\x08\x06\x00\x00\x00", "image (PNG)"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00", "image (JPEG)"),
        (b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00", "image (GIF)"),
        (b"RIFF\x24\x00\x00\x00WEBPVP8 \x18\x00\x00\x00", "image (WebP)"),
        (b'cb({"a":[1,2', "cut short"),
        (b'{"a":[1,2', "cut short"),
        (b'\xef\xbb\xbf{"a":"x', "cut short"),
        (b"<html><body>fine</body></html>", ""),
        (b'{"a":1}', ""),
        (b"not json at all", ""),
    ],
    ids=[
        "empty",
        "blank",
        "gzip",
        "zstd",
        "utf16le",
        "utf16be",
        "utf16-bom",
        "binary",
        "zeros",
        "png",
        "jpeg",
        "gif",
        "webp",
        "jsonp-cut",
        "json-cut",
        "bom-json-cut",
        "html",
        "whole-json",
        "text",
    ],
)
def test_describe_unreadable_names_what_a_body_is(body: bytes, words: str) -> None:
    said = describe_unreadable(body)
    assert (words in said) if words else said == ""


@pytest.mark.parametrize(
    ("text", "words"), [("", "the text is empty"), (" \n", "the text is empty"), ('{"a":', "cut short")]
)
def test_json_that_is_not_there_says_empty_not_cut_short(text: str, words: str) -> None:
    """``load_json("")`` said "cut short after 0 characters": nothing was cut, there was nothing."""
    with pytest.raises(ParseError) as info:
        load_json(text, what="an answer")
    assert words in str(info.value) and ("cut short" in words) == ("cut short" in str(info.value))

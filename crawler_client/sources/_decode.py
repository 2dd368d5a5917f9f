"""Bytes to text, JSON and soup, the same way for every source.

Bodies are utf-8 with a GB18030 fallback (GBK pages that claim utf-8, old ECSHOP/JD installs), JSONP is
unwrapped by hand (no regex backtracking on megabyte bodies), and every malformed input becomes a
``ParseError`` here so the sources never leak a ``ValueError``/``RecursionError`` to the runtime.
"""

from __future__ import annotations

import json
from typing import Any

from bs4 import BeautifulSoup, Tag

from icecrawler.errors import ParseError
from icecrawler.models import Post

__all__ = ["decode_body", "html_text", "load_json", "make_soup", "strip_jsonp", "with_html"]


def decode_body(body: bytes) -> str:
    """utf-8 (BOM stripped), else GB18030 — a superset of GBK that decodes any byte string."""
    if body.startswith(b"\xef\xbb\xbf"):
        body = body[3:]
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return body.decode("gb18030", errors="replace")


def strip_jsonp(text: str) -> str:
    """``callback({...});`` → ``{...}``; plain JSON passes through unchanged."""
    stripped = text.strip()
    if not stripped or stripped[0] in "{[":
        return stripped
    open_at = stripped.find("(")
    close_at = stripped.rfind(")")
    name = stripped[:open_at].strip()
    if open_at <= 0 or close_at < open_at or not name.replace("_", "a").replace(".", "a").replace("$", "a").isalnum():
        return stripped
    tail = stripped[close_at + 1:].strip()
    if tail not in ("", ";"):
        return stripped
    return stripped[open_at + 1:close_at].strip()


def load_json(text: str, *, what: str) -> Any:
    """``json.loads`` with every failure (syntax, nesting depth, huge ints) as a ``ParseError``."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ParseError(f"{what}: not JSON ({type(exc).__name__}: {str(exc)[:80]})",
                         error_class="bad-json") from exc


def make_soup(markup: str) -> BeautifulSoup:
    """An lxml soup of ``markup``. The ``<html><body>`` prefix makes bs4's heuristics (markup that looks
    like a URL, a filename or XML) stay quiet, so fragments and garbage never raise warnings."""
    return BeautifulSoup("<html><body>" + markup.replace("\x00", ""), "lxml")


def html_text(node: Tag) -> str:
    """Visible text of an HTML fragment: ``<br>`` → newline, emoticon ``<img alt="[doge]">`` → its alt."""
    parts: list[str] = []
    for element in node.descendants:
        if isinstance(element, Tag):
            if element.name == "br":
                parts.append("\n")
            elif element.name == "img":
                alt = element.get("alt")
                if isinstance(alt, str):
                    parts.append(alt)
        elif type(element).__name__ == "NavigableString":
            parts.append(" ".join(str(element).split("\n")))  # source newlines are whitespace in HTML
    lines = (" ".join(line.split()) for line in "".join(parts).split("\n"))
    return "\n".join(lines).strip()


def with_html(post: Post, html: str) -> Post:
    """Give ``post`` a new HTML body (a long text's full version) and the text derived from it, in place."""
    post.html = html
    post.text = html_text(make_soup(html))
    return post
